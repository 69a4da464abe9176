#!/usr/bin/env bash
# Every collective on CUDA device buffers, stream-ordered (tests/gpu/collectives_gpu.cu), at
# P = 1, 2, 3, 4 ranks launched through ringlet-run, all on this machine's GPU(s) (rank r on
# device LOCAL_RANK % device count).
#
# Runs, in order (each through ringlet-run --timeout; RINGLET_TIMEOUT=60 unless set):
#   tcp       P = 1, 2, 3, 4: the full grid (every collective x dtype x op x count {0, 1, P+1,
#             1000003} x {out of place, in place} on a non-blocking stream, plus a stream-NULL
#             call per collective x dtype x count), RINGLET_TRANSPORT=tcp.
#   tcp       P = 3, --quick --batch 64: 64 cases queued on the stream between synchronisations.
#   tcp       P = 2, --quick --max-count 4099 --stream blocking: a stream made by cudaStreamCreate
#             (it synchronises with the legacy default stream; a library that uses the legacy
#             stream behind such a stream deadlocks, which the program reports within
#             --stream-timeout).
#   cuda_ipc  P = 1, 2, 3, 4 as tcp above, when the build has that transport: `ringlet-perf
#             --transports` lists it, or else a probe run (collectives_gpu --probe with
#             RINGLET_TRANSPORT=cuda_ipc) does not say "not a transport of this build".
#             Otherwise: "cuda_ipc transport not built: skipped".
#   memcheck  compute-sanitizer --tool memcheck, P = 1, --quick --max-count 1000 (when
#             compute-sanitizer is installed).
# The program is (re)built first, after `make` has built $BUILD/lib:
#   nvcc -O2 -std=c++17 -Iinclude tests/gpu/collectives_gpu.cu -L$BUILD/lib
#        -Xlinker -rpath -Xlinker $PWD/$BUILD/lib -lringlet -o $BUILD/tests/gpu/collectives_gpu
#
# Environment: BUILD (default build); NVCC (default: nvcc on PATH, else $CUDA_HOME/bin/nvcc);
#   RINGLET_GPU_COLLECTIVES_ARGS appended to every run's arguments (e.g. "--quick --max-count
#   1000" for a fast check); RINGLET_GPU_TEST_NP (default "1 2 3 4"); RINGLET_TEST_SEED.
# Takes about 2 to 5 minutes on one H100 with 16 cores (an estimate: not yet timed there).
# Exit status: 0 all passed; 77 no GPU ("SKIP: no GPU") or no nvcc; 1 a failure.
set -u
cd "$(dirname "$0")/../.." || exit 1

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi >/dev/null 2>&1; then
    echo "SKIP: no GPU"
    exit 77
fi

BUILD=${BUILD:-build}
case $BUILD in
/*) BUILD_ABS=$BUILD ;;
*) BUILD_ABS=$PWD/$BUILD ;;
esac
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$(command -v nvcc 2>/dev/null || { [ -x "$CUDA_HOME/bin/nvcc" ] && echo "$CUDA_HOME/bin/nvcc"; })}
SANITIZER=$(command -v compute-sanitizer 2>/dev/null ||
    { [ -n "$NVCC" ] && [ -x "$(dirname "$NVCC")/compute-sanitizer" ] && echo "$(dirname "$NVCC")/compute-sanitizer"; } ||
    { [ -x "$CUDA_HOME/bin/compute-sanitizer" ] && echo "$CUDA_HOME/bin/compute-sanitizer"; })
RUN="$BUILD/bin/ringlet-run"
PERF="$BUILD/bin/ringlet-perf"
PROG="$BUILD/tests/gpu/collectives_gpu"
SRC=tests/gpu/collectives_gpu.cu
SEED=${RINGLET_TEST_SEED:-20240613}
EXTRA=${RINGLET_GPU_COLLECTIVES_ARGS:-}
NPS=${RINGLET_GPU_TEST_NP:-1 2 3 4}
# a hang shows up as an error of the library (or of the program's stream deadline, 60 s
# later) well before the launcher's --timeout
export RINGLET_TIMEOUT=${RINGLET_TIMEOUT:-60}

if [ -z "$NVCC" ]; then
    echo "SKIP: nvcc not found (set NVCC or CUDA_HOME); the library is then built without CUDA too"
    exit 77
fi
for f in "$RUN" "$BUILD/lib/libringlet.so"; do
    if [ ! -e "$f" ]; then
        echo "FAIL: $f not found (run make first, or set BUILD)"
        exit 1
    fi
done
if [ ! -f "$BUILD/obj/kernels/reduce_cuda.o" ]; then
    echo "FAIL: $BUILD/lib was built without CUDA ($BUILD/obj/kernels/reduce_cuda.o is missing): rebuild with make after nvcc is on PATH"
    exit 1
fi
echo "collectives_gpu.sh: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1); nvcc $NVCC; compute-sanitizer ${SANITIZER:-none}; BUILD=$BUILD"

# ---- build ----
mkdir -p "$BUILD/tests/gpu"
if [ ! -x "$PROG" ] || [ "$SRC" -nt "$PROG" ] || [ include/ringlet.h -nt "$PROG" ] || [ "$BUILD/lib/libringlet.so" -nt "$PROG" ]; then
    echo "building $PROG"
    # shellcheck disable=SC2086
    if ! "$NVCC" -O2 -std=c++17 -Iinclude "$SRC" -L"$BUILD/lib" -Xlinker -rpath -Xlinker "$BUILD_ABS/lib" -lringlet \
        -o "$PROG" ${RINGLET_GPU_NVCC_FLAGS:-}; then
        echo "FAIL: building $PROG"
        exit 1
    fi
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-collectives-gpu.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# one_run NAME P LAUNCH_TIMEOUT TRANSPORT WRAPPER ARGS...
#   WRAPPER: "" or the sanitizer command line put before the program.
one_run() {
    local name=$1 P=$2 limit=$3 tr=$4 wrap=$5
    shift 5
    local t rc dt good cases
    t=$(now_ms)
    # shellcheck disable=SC2086
    env RINGLET_TRANSPORT="$tr" "$RUN" -n "$P" --timeout "$limit" $wrap "$PROG" --seed "$SEED" "$@" $EXTRA \
        >"$TMP/out" 2>"$TMP/err"
    rc=$?
    dt=$(($(now_ms) - t))
    good=$(grep -cE "^\[[0-9]+\] collectives_gpu: rank [0-9]+ of $P: [0-9]+ cases checked, 0 failed" "$TMP/out")
    cases=$(sed -n "s/^\[0\] collectives_gpu: rank 0 of $P: \([0-9]*\) cases checked.*/\1/p" "$TMP/out")
    local label="$name P=$P${*:+ $*}${EXTRA:+ $EXTRA}"
    if [ "$rc" = 0 ] && [ "$good" = "$P" ]; then
        echo "ok:   $label: ${cases:-?} cases per rank, $((dt / 1000)).$((dt % 1000 / 100)) s"
        return 0
    fi
    fails=$((fails + 1))
    local why="launcher exit status $rc"
    [ "$rc" = 124 ] && why="timed out after $limit s (launcher exit status 124)"
    echo "FAIL: $label: $why, $good of $P ranks passed ($((dt / 1000)) s)"
    grep -E 'FAIL|not printed|collectives_gpu: rank|ERROR SUMMARY|Invalid|========= ' "$TMP/out" | head -n 60
    echo "----- last lines of stderr:"
    tail -n 25 "$TMP/err"
    echo "-----"
    return 1
}

t_all=$(now_ms)

# ---- tcp ----
for P in $NPS; do
    one_run tcp "$P" 400 tcp ""
done
one_run tcp 3 300 tcp "" --quick --batch 64
one_run tcp 2 200 tcp "" --quick --max-count 4099 --stream blocking

# ---- cuda_ipc ----
has_ipc=0
if out=$("$PERF" --transports 2>/dev/null) && [ -n "$out" ]; then
    grep -qw cuda_ipc <<<"$out" && has_ipc=1
    echo "ringlet-perf --transports: $(tr '\n' ' ' <<<"$out")"
else
    # the env probe: init with the transport forced; a build without it says so at init
    RINGLET_TRANSPORT=cuda_ipc "$RUN" -n 2 --timeout 120 "$PROG" --probe >"$TMP/probe" 2>&1
    prc=$?
    if grep -q "not a transport of this build" "$TMP/probe"; then
        has_ipc=0
    elif [ $prc = 0 ]; then
        has_ipc=1
    else
        # the build knows cuda_ipc but init failed: run anyway, so that the failure is reported
        echo "cuda_ipc probe failed (exit status $prc):"
        tail -n 10 "$TMP/probe"
        has_ipc=1
    fi
fi
if [ $has_ipc = 1 ]; then
    for P in $NPS; do
        one_run cuda_ipc "$P" 400 cuda_ipc ""
    done
else
    echo "cuda_ipc transport not built: skipped"
fi

# ---- compute-sanitizer ----
if [ -n "$SANITIZER" ]; then
    # shellcheck disable=SC2086
    one_run "memcheck tcp" 1 600 tcp "$SANITIZER --tool memcheck --error-exitcode 99 --print-limit 20" \
        --quick --max-count 1000 && grep -h "ERROR SUMMARY" "$TMP/out" | head -n 1
else
    echo "compute-sanitizer not found: memcheck run skipped"
fi

dt=$(($(now_ms) - t_all))
if [ $fails = 0 ]; then
    echo "collectives_gpu: all passed ($((dt / 1000)) s)"
    exit 0
fi
echo "collectives_gpu: $fails runs failed ($((dt / 1000)) s)"
exit 1

#!/usr/bin/env bash
# Everything that needs a GPU, in one script: the one to run on the device machine
# (it runs in the repository root; nvcc there, CUDA_HOME set), e.g.
#     set -o pipefail; tests/gpu/run.sh 2>&1 | tee $OUT/gpu.log
#
# Steps, in order (each logs to $BUILD/tests/gpu/logs/<step>.log):
#   build            make -j16 (the library with its CUDA kernels; checks that nvcc was used)
#   build-gpu-tests  nvcc: tests/gpu/test_kernels.cu with kernels/reduce_cuda.cu and
#                    kernels/reduce_cpu.c, into $BUILD/tests/gpu/ (build-bench: the same for
#                    perf/gpu_kernels_bench.cu)
#   test_kernels     every dtype x op on the device against the CPU kernels, bit for bit;
#                    rl_divide_device; rl_stream_wait_flag (tests/gpu/test_kernels.cu)
#   memcheck         compute-sanitizer --tool memcheck on a small test_kernels run (when
#                    compute-sanitizer is installed)
#   device-collectives  tests/mp/collectives.sh on device buffers over the cuda backend
#                    (RINGLET_TEST_DEVICE=cuda RINGLET_TEST_MEMORY=device): every collective x
#                    dtype x op, P = 1..5, over shm and tcp, several ranks on each GPU
#   device-stream    tests/mp/stream.sh over cuda: stream order, abort, async errors
#   device-batch     tests/mp/batch.sh over cuda: 64 collectives queued on a stream between
#                    synchronisations, P = 3 over tcp (the case that failed once), 2 and 4
#   device-ipc-p8    8 ranks on the GPU(s), device buffers over cuda_ipc, every collective
#   device-mps       the cuda_ipc runs of device-collectives again, under MPS
#                    (tests/gpu/mps.sh)
#   device-memcheck  compute-sanitizer --tool memcheck on a small device collectives run (P = 2)
#   device-more      tests/mp/more.sh over cuda: all-to-all, gather, scatter, groups, split,
#                    pre-multiplied sums (device scalar too), P = 1..4
#   device-nccl      tests/mp/nccl.sh over cuda: the NCCL API on ncclMemAlloc memory, P = 1..4
#   device-ddp       tests/mp/ddp.sh over cuda: the C DDP layer on device memory, every option
#   torch-nccl       PyTorch's torch.distributed backend "nccl" on ringlet's libnccl.so.2
#                    (LD_PRELOAD), 2 and 4 ranks on the one GPU: every collective of
#                    tests/gpu/torch_nccl.py, and ringlet's INFO line (needs CUDA torch)
#   ddp-cuda         tests/python/ddp_vs_torch.py --device cuda --nccl, 2 and 4 ranks:
#                    ringlet.torch DDP and torch DDP over ringlet's nccl, both against torch
#                    DDP over Gloo on CUDA, to 1e-5 (needs CUDA torch)
#   ddp-bench        perf/ddp_bench.sh on CUDA at 2 and 4 ranks (issue 14's goals)
#   bench            perf/gpu_kernels_bench: copy floor vs float32 / bfloat16 / float16 sum at
#                    256 MiB; PASS at >= 90% of cudaMemcpy D2D bandwidth
#   device-bench     perf/device_bench.sh: device vs host buffers over tcp and shm, and PyTorch's
#                    Gloo on CUDA tensors, at 2 and 4 ranks, 64 MiB (the goals' table)
#   ipc-bench        perf/ipc_bench.sh: cuda_ipc busbw against the memory floors at 2 and 4
#                    ranks, and the 8-byte latency, with and without MPS
#   tcp-bench        perf/compare on the machine's cores (not the GPU): ringlet over TCP (its
#                    reduction threads on by default) against PyTorch's Gloo, Gloo and Open MPI
#                    TCP at 2 and 4 ranks, 64 MiB, and the 8-byte latency (issue 16's 16-core goal:
#                    ringlet-tcp >= 3x PyTorch's Gloo); needs the peers (scripts/peer-kit.sh)
#   host-suite       make test (the CI suite; its device tests run over the simulator there)
# and closes with a summary table.
#
# Options:
#   --tests-only     build-gpu-tests, test_kernels, memcheck and the device-* tests only: no make,
#                    no bench, no host suite (tests/mp/gpu.sh runs this, from inside `make test`)
#   --no-bench       leave out the benchmark
#   --no-host-suite  leave out `make test`
# Environment: BUILD (default build), NVCC (default: nvcc on PATH, else $CUDA_HOME/bin/nvcc),
#   GPU_ARCH (default: the Makefile's sm_80, sm_90 and compute_90 PTX), RINGLET_TEST_SEED.
# With no GPU the test programs print "SKIP: no GPU" and exit 77; so do their steps here.
# Exit status: 1 if any step failed; 77 if every step was skipped; else 0.
set -u
cd "$(dirname "$0")/../.."

tests_only=0 bench=1 host_suite=1
for arg in "$@"; do
    case $arg in
    --tests-only) tests_only=1 bench=0 host_suite=0 ;;
    --no-bench) bench=0 ;;
    --no-host-suite) host_suite=0 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "tests/gpu/run.sh: unknown option $arg (try --help)" >&2; exit 2 ;;
    esac
done

export BUILD="${BUILD:-build}"
# tests/mp/gpu.sh (run by `make test`) skips itself while this script runs: the host suite
# started here must not start the GPU tests a second time.
export RINGLET_GPU_RUN_ACTIVE=1
GB="$BUILD/tests/gpu"
LOGDIR="$GB/logs"
mkdir -p "$LOGDIR"

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$(command -v nvcc 2>/dev/null || { [ -x "$CUDA_HOME/bin/nvcc" ] && echo "$CUDA_HOME/bin/nvcc"; })}
GPU_ARCH=${GPU_ARCH:-"-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"}
SANITIZER=$(command -v compute-sanitizer 2>/dev/null ||
    { [ -n "$NVCC" ] && [ -x "$(dirname "$NVCC")/compute-sanitizer" ] && echo "$(dirname "$NVCC")/compute-sanitizer"; } ||
    { [ -x "$CUDA_HOME/bin/compute-sanitizer" ] && echo "$CUDA_HOME/bin/compute-sanitizer"; })

gpu_info=""
if command -v nvidia-smi >/dev/null 2>&1 &&
    gpu_info=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null) &&
    [ -n "$gpu_info" ]; then
    have_gpu=1
else
    have_gpu=0 gpu_info="none (no nvidia-smi, or it failed)"
fi
echo "tests/gpu/run.sh: GPU: $gpu_info; nvcc: ${NVCC:-none}; compute-sanitizer: ${SANITIZER:-none}; BUILD=$BUILD"

# ---- step bookkeeping ----
S_NAME=() S_RES=() S_TIME=() S_NOTE=()
record() { # name result seconds note
    S_NAME+=("$1") S_RES+=("$2") S_TIME+=("$3") S_NOTE+=("$4")
    printf '%-5s %s (%ds)%s\n' "$2" "$1" "$3" "${4:+  $4}"
}
# run_step name time-limit show command...
#   show: all (print the whole log), none, or an extended regex of the lines to print.
#   A failed step also prints the end of its log. Exit 0 = PASS, 77 = SKIP, else FAIL.
run_step() {
    local name=$1 limit=$2 show=$3
    shift 3
    local log="$LOGDIR/$name.log" t0=$SECONDS rc res note=""
    echo
    local cmd="$*"
    echo "== $name: ${cmd%%$'\n'*}"
    timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
    rc=$?
    case $show in
    all) cat "$log" ;;
    none) ;;
    *) grep -E -- "$show" "$log" ;;
    esac
    case $rc in
    0) res=PASS ;;
    77) res=SKIP note=$(grep -m1 -i 'skip' "$log") ;;
    124 | 137) res=FAIL note="timed out after ${limit}s, log $log" ;;
    *) res=FAIL note="exit $rc, log $log" ;;
    esac
    if [ $res = FAIL ] && [ "$show" != all ]; then tail -n 40 "$log" | sed 's/^/    | /'; fi
    record "$name" "$res" $((SECONDS - t0)) "$note"
    return $rc
}

# ---- build ----
if [ $tests_only = 0 ]; then
    if run_step build 900 'warning|error|Error' make -j16 BUILD="$BUILD"; then
        if [ -n "$NVCC" ] && [ ! -f "$BUILD/obj/kernels/reduce_cuda.o" ]; then
            record build-cuda FAIL 0 "nvcc is here but the Makefile did not build kernels/reduce_cuda.cu"
        fi
    fi
fi

# ---- GPU test programs ----
built=0 bench_built=0
if [ -z "$NVCC" ]; then
    record build-gpu-tests SKIP 0 "SKIP: no nvcc (set NVCC or CUDA_HOME)"
else
    # tests/gpu/build_programs.sh: the kernels' objects (the library build's CUDA object when
    # fresh) and the two programs, into $GB.
    rm -f "$GB/test_kernels" "$GB/gpu_kernels_bench"
    progs="test_kernels"
    [ $bench = 1 ] && progs="test_kernels gpu_kernels_bench"
    # shellcheck disable=SC2086
    run_step build-gpu-tests 600 'warning|error' env NVCC="$NVCC" GPU_ARCH="$GPU_ARCH" BUILD="$BUILD" \
        bash tests/gpu/build_programs.sh --out "$GB" $progs && built=1
    [ $built = 1 ] && [ -x "$GB/gpu_kernels_bench" ] && bench_built=1
fi

# ---- tests ----
if [ $built = 1 ]; then
    run_step test_kernels 600 all "$GB/test_kernels"
    if [ $have_gpu = 0 ]; then
        record memcheck SKIP 0 "SKIP: no GPU"
    elif [ -z "$SANITIZER" ]; then
        record memcheck SKIP 0 "SKIP: compute-sanitizer not found"
    else
        run_step memcheck 600 'ERROR SUMMARY|^FAIL|^SKIP|test_kernels:' \
            "$SANITIZER" --tool memcheck --error-exitcode 1 "$GB/test_kernels" --max-n 4099
    fi
else
    record test_kernels SKIP 0 "SKIP: test programs not built"
fi

# ---- multi-process tests on device buffers, over the cuda backend ----
if [ $have_gpu = 0 ]; then
    record device-collectives SKIP 0 "SKIP: no GPU"
    record device-stream SKIP 0 "SKIP: no GPU"
    record device-batch SKIP 0 "SKIP: no GPU"
else
    run_step device-collectives 1500 '^(ok|FAIL|collectives)' env RINGLET_TEST_DEVICE=cuda RINGLET_TEST_MEMORY=device \
        BUILD="$BUILD" bash tests/mp/collectives.sh
    run_step device-stream 600 '^(ok|FAIL|stream)' env RINGLET_TEST_DEVICE=cuda BUILD="$BUILD" bash tests/mp/stream.sh
    run_step device-batch 600 '^(ok|FAIL|batch)' env RINGLET_TEST_DEVICE=cuda BUILD="$BUILD" bash tests/mp/batch.sh
    run_step device-ipc-p8 900 'FAIL|collectives: rank|cuda_ipc connections' bash -c "
        RINGLET_DEVICE=cuda RINGLET_DEBUG=INFO '$BUILD/bin/ringlet-run' -n 8 --timeout 850 '$BUILD/tests/mp/collectives' \
            --memory device --max-count 100003 >'$LOGDIR/p8.out' 2>&1
        rc=\$?
        grep -vE ' INFO: ' '$LOGDIR/p8.out' | tail -n 30
        n=\$(grep -c 'over cuda_ipc (device buffers)' '$LOGDIR/p8.out')
        echo \"cuda_ipc connections: \$n\"
        [ \$rc = 0 ] && [ \$n -gt 0 ]"
    run_step device-mps 1500 '^(ok|FAIL|collectives|mps)|SKIP' bash tests/gpu/mps.sh env RINGLET_TEST_DEVICE=cuda \
        RINGLET_TEST_MEMORY=device RINGLET_TEST_DEVICE_TRANSPORTS=ipc BUILD="$BUILD" bash tests/mp/collectives.sh
    if [ -n "$SANITIZER" ]; then
        run_step device-memcheck 900 'ERROR SUMMARY|FAIL|collectives: rank' env RINGLET_DEVICE=cuda RINGLET_TIMEOUT=120 \
            "$BUILD/bin/ringlet-run" -n 2 --timeout 850 "$SANITIZER" --tool memcheck --error-exitcode 99 --print-limit 20 \
            "$BUILD/tests/mp/collectives" --memory device --quick --max-count 4099
    else
        record device-memcheck SKIP 0 "SKIP: compute-sanitizer not found"
    fi
    run_step device-more 900 '^(ok|FAIL|more)' env RINGLET_TEST_DEVICE=cuda BUILD="$BUILD" bash tests/mp/more.sh
    run_step device-nccl 900 '^(ok|FAIL|nccl)' env RINGLET_TEST_DEVICE=cuda BUILD="$BUILD" bash tests/mp/nccl.sh
    run_step device-ddp 900 '^(ok|FAIL|ddp)' env RINGLET_TEST_DEVICE=cuda BUILD="$BUILD" bash tests/mp/ddp.sh
    PY=${PYTHON:-python3}
    if "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
        run_step torch-nccl 900 'torch_nccl:|FAIL|NCCL INFO \[ringlet.*communicator up' bash -c "
            fails=0
            for n in 2 4; do
                LD_PRELOAD='$PWD/$BUILD/lib/libnccl.so.2' NCCL_DEBUG=INFO RINGLET_DEVICE=cuda \
                    '$BUILD/bin/ringlet-run' -n \$n --timeout 800 '$PY' tests/gpu/torch_nccl.py >'$LOGDIR/torch_nccl.\$n' 2>&1
                rc=\$?
                grep -E 'torch_nccl:|FAIL' '$LOGDIR/torch_nccl.\$n'
                grep -m1 -E 'NCCL INFO \[ringlet.*communicator up' '$LOGDIR/torch_nccl.\$n'
                ok=\$(grep -c 'checks, 0 failed' '$LOGDIR/torch_nccl.\$n')
                [ \$rc = 0 ] && [ \$ok = \$n ] || fails=\$((fails + 1))
            done
            [ \$fails = 0 ]"
        run_step ddp-cuda 1500 'ddp_vs_torch|FAIL' bash -c "
            fails=0
            for n in 2 4; do
                rm -f '$LOGDIR/store.\$n'
                LD_PRELOAD='$PWD/$BUILD/lib/libnccl.so.2' RINGLET_DEVICE=cuda PYTHONPATH='$PWD/python' \
                    RINGLET_LIBRARY='$PWD/$BUILD/lib/libringlet.so' '$BUILD/bin/ringlet-run' -n \$n --timeout 1400 \
                    '$PY' tests/python/ddp_vs_torch.py --device cuda --nccl --store '$LOGDIR/store.\$n' \
                    >'$LOGDIR/ddp_cuda.\$n' 2>&1 || fails=\$((fails + 1))
                grep -E 'ddp_vs_torch|FAIL' '$LOGDIR/ddp_cuda.\$n'
            done
            [ \$fails = 0 ]"
        if [ $bench = 1 ]; then
            run_step ddp-bench 900 'ddp_bench: (world|none|torch|ringlet|nccl|overhead|ringlet /)' bash -c "
                for n in 2 4; do
                    LD_PRELOAD='$PWD/$BUILD/lib/libnccl.so.2' RINGLET_DEVICE=cuda BUILD='$BUILD' PYTHON='$PY' \
                        bash perf/ddp_bench.sh -n \$n --device cuda --modes none,torch,ringlet,nccl --rounds 4 || exit 1
                done"
        fi
    else
        record torch-nccl SKIP 0 "SKIP: no CUDA build of torch for $PY"
        record ddp-cuda SKIP 0 "SKIP: no CUDA build of torch for $PY"
    fi
fi

# ---- benchmark ----
if [ $bench = 1 ]; then
    if [ $bench_built = 1 ]; then
        run_step bench 300 all "$GB/gpu_kernels_bench"
    else
        record bench SKIP 0 "SKIP: benchmark not built"
    fi
    if [ $have_gpu = 1 ]; then
        run_step device-bench 900 all env BUILD="$BUILD" bash perf/device_bench.sh -p 3 -o "$GB/device_bench"
        run_step ipc-bench 900 all env BUILD="$BUILD" bash perf/ipc_bench.sh -p 3 -o "$GB/ipc_bench"
    else
        record device-bench SKIP 0 "SKIP: no GPU"
        record ipc-bench SKIP 0 "SKIP: no GPU"
    fi
    run_step tcp-bench 900 '^## |^(64 MiB|8 B lat)|^(2|4) +(64 MiB|8 B lat)|missing:' env BUILD="$BUILD" RANKS="2 4" SIZES=64M \
        TRANSPORTS=tcp PEERS="gloo-torch gloo mpi-tcp" PASSES=3 OUT="$GB/tcp_compare" bash perf/compare
fi

# ---- host suite ----
if [ $host_suite = 1 ]; then
    run_step host-suite 1800 all make test BUILD="$BUILD"
fi

# ---- summary ----
npass=0 nfail=0 nskip=0
echo
echo "== tests/gpu/run.sh summary   GPU: $gpu_info"
printf '%-18s %-6s %6s  %s\n' step result time note
for i in "${!S_NAME[@]}"; do
    printf '%-18s %-6s %5ds  %s\n' "${S_NAME[$i]}" "${S_RES[$i]}" "${S_TIME[$i]}" "${S_NOTE[$i]}"
    case ${S_RES[$i]} in
    PASS) npass=$((npass + 1)) ;;
    FAIL) nfail=$((nfail + 1)) ;;
    *) nskip=$((nskip + 1)) ;;
    esac
done
echo "$npass passed, $nfail failed, $nskip skipped (logs in $LOGDIR)"
if [ $nfail -gt 0 ]; then exit 1; fi
if [ $npass -eq 0 ]; then exit 77; fi
exit 0

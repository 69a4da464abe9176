#!/usr/bin/env bash
# The GPU suite, cut to fit the GPU machine's short calls (tests/gpu/README.md): a quick tier of
# at most 6 minutes, build included, and the rest in groups of at most 8 minutes each, every
# step under its own timeout, its result written out as soon as it ends.
#
#   tests/gpu/run.sh [--quick]          the quick tier (the default): the first run on a GPU
#   tests/gpu/run.sh --group N[,M...]   group N (each runs on its own, on a fresh machine:
#                                       it builds first), benchmarks in the last groups
#   tests/gpu/run.sh --steps a,b,...    only these steps, in this order (the build first,
#                                       added by itself, when a step needs it and $BUILD lacks it)
#   tests/gpu/run.sh --all              the quick tier, then every group (hours: not for one call)
#   tests/gpu/run.sh --tests-only       the quick tier's tests (no build, no benchmark): what
#                                       tests/mp/gpu.sh runs from inside `make test`
#   tests/gpu/run.sh --list             every step with its budget, the tiers and their totals
#   tests/gpu/run.sh --dry-run ...      print the steps a selection would run, run none
# Selections add up: --quick --group 2 runs both, each step once.
#
# A step's budget is the most it can take: SIGTERM to its whole process group 5 s before the
# budget is up, SIGKILL at the budget (timeout --kill-after); a hang costs that step only. Steps
# that need a GPU say SKIP where none is usable (no nvidia-smi, or it lists none), and so does
# a step whose tool is missing (compute-sanitizer, MPS, a CUDA build of torch, nccl-tests).
# Each step's output goes to $BUILD/tests/gpu/logs/<step>.log. As each step ends, its result
# line and the tail of its log are appended to $OUT/results.txt, and $OUT/summary.txt is
# rewritten (the table so far); OUT is $RINGLET_GPU_OUT, else $OUT (the device machine's),
# else $BUILD/tests/gpu. Both end
# with the line "N passed, N failed, N skipped"; $OUT/logs.tar.gz holds the whole logs once
# the run ends. Nothing else is written to OUT (the device tool brings back 8 files).
#
# Environment: BUILD (default build); RINGLET_GPU_OUT (see above); RINGLET_TIMEOUT for the
#   steps (default 20 s: a deadline of the library fires well inside a step's budget);
#   NVCC (default: nvcc on PATH, else $CUDA_HOME/bin/nvcc); GPU_ARCH (the test programs'
#   -gencode flags; default the Makefile's); PYTHON (the python with torch; default python3);
#   NCCL_TESTS_SRC (a nccl-tests source tree carried along, for the step nccl-tests);
#   RINGLET_TEST_SEED; RINGLET_GPU_NONE=1 acts as if no GPU were here (tests/mp/gpu_suite.sh).
# Exit status: 1 if a step failed; 77 if none passed and none failed; else 0; 2 on bad usage.
set -u
cd "$(dirname "$0")/../.." || exit 1
# ringlet reads NCCL's names of the variables it mirrors where its own are unset (README,
# Environment variables): the machine's NCCL settings (shown by preflight) are set aside.
# (Each step runs in a child of this script, which inherits the parent's note.)
: "${NCCL_SET_ASIDE=$(env | grep -E '^NCCL_(SOCKET_IFNAME|IB_HCA|IB_DISABLE|SHM_DISABLE|P2P_DISABLE|IB_TIMEOUT|IB_RETRY_CNT|IB_SL|IB_TC)=' | tr '\n' ' ')}"
export NCCL_SET_ASIDE
unset NCCL_SOCKET_IFNAME NCCL_IB_HCA NCCL_IB_DISABLE NCCL_SHM_DISABLE NCCL_P2P_DISABLE NCCL_IB_TIMEOUT \
    NCCL_IB_RETRY_CNT NCCL_IB_SL NCCL_IB_TC
SELF=tests/gpu/run.sh

# ---------------------------------------------------------------------------------------------
# The steps: name | budget in seconds (the most the step may take) | needs | what it runs.
#   needs: gpu   skipped where no GPU is usable
#          build needs make's output: --steps runs the build step first when $BUILD lacks it
STEP_TABLE='
preflight|20|-|GPU, driver, CUDA version, compute mode, MIG, MPS control (nvidia-cuda-mps-control), GPU processes; nvcc, compute-sanitizer, cores
build|45|-|make -j16: the library with its CUDA kernels (fails if nvcc is here and reduce_cuda.o is not), tests, libnccl.so.2
test_kernels-quick|25|gpu|tests/gpu/test_kernels --max-n 262147: device kernels against the CPU ones bit for bit (reduce, divide, many, scale, convert, wait/write flag, last error)
collectives-p2-ipc|25|gpu,build|collectives.sh plan quick over cuda_ipc: P = 2, device memory, every collective, 4 dtypes x 2 ops each, default and 4 KiB slots, counts to 1000003
collectives-p2-shm|25|gpu,build|the same over shm (pinned host slots, reduced on the GPU)
stream-p2|55|gpu,build|stream.sh over cuda, ipc and shm: stream order, abort with a call pending, a peer that leaves, the legacy stream; holds by memory operations, by a kernel (order), and none (the default: order, also with one hardware queue); capture, per-thread, the cuda_ipc probe cases
torch-nccl-p2|50|gpu,build|PyTorch backend "nccl" on ringlet'"'"'s libnccl.so.2 (LD_PRELOAD), 2 ranks on the GPU: tests/gpu/torch_nccl.py
ipc-p4|55|gpu,build|collectives.sh plan quick-p4: 4 ranks on the one GPU over cuda_ipc, small chunks and slots; again with one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1, as Megatron-LM sets it)
ipc-p4-mps|30|gpu,build|the same under MPS (tests/gpu/mps.sh)
bench|25|gpu|perf/gpu_kernels_bench: copy floor vs float32 / bfloat16 / float16 sum at 256 MiB; PASS at >= 90% of cudaMemcpy D2D
test_kernels|80|gpu|tests/gpu/test_kernels, --max-n 1000003
memcheck|170|gpu|compute-sanitizer memcheck on tests/gpu/test_kernels --max-n 4099
device-stream|70|gpu,build|stream.sh over cuda, ipc, shm and tcp, holds by memory operations and by a kernel
device-batch|60|gpu,build|batch.sh over cuda: 64 collectives queued between synchronisations, P = 3 tcp, 2 shm, 4 ipc
device-collectives-ipc|180|gpu,build|collectives.sh on device memory over cuda_ipc: every collective x dtype x op, P = 1..5, then the cuda_ipc plan (small slots, ring, host buffers over cuda_ipc)
device-collectives-shm|180|gpu,build|collectives.sh on device memory over shm, P = 1..5
device-collectives-tcp|180|gpu,build|collectives.sh on device memory over tcp, P = 1..5
device-ipc-p8|200|gpu,build|8 ranks on the GPU, device buffers over cuda_ipc, every collective x dtype, --quick (2 ops per dtype), count 100003
device-mps|200|gpu,build|device-collectives-ipc under MPS
device-memcheck|240|gpu,build|compute-sanitizer memcheck on collectives, P = 2, device memory, --quick, count 4099
device-more|90|gpu,build|more.sh over cuda: all-to-all, gather, scatter, groups, split, pre-multiplied sums, P = 1..4
device-nccl|90|gpu,build|nccl.sh over cuda: the NCCL API on ncclMemAlloc memory, P = 1..4
device-ddp|120|gpu,build|ddp.sh over cuda: the C DDP layer on device memory, every option
torch-nccl|90|gpu,build|tests/gpu/torch_nccl.py at 2 and 4 ranks
ddp-cuda-p2|150|gpu,build|tests/python/ddp_vs_torch.py --device cuda --nccl at 2 ranks: ringlet DDP and torch DDP over ringlet'"'"'s nccl against torch DDP over Gloo
ddp-cuda-p4|170|gpu,build|the same at 4 ranks
torch-backend-ops-p2|150|gpu,build|the torch.distributed backend "ringlet" on CUDA tensors, 2 ranks on the GPU: tests/python/backend_ops.py --device cuda (every operation, sync and async, against Gloo on CPU copies)
torch-backend-ddp-p2|150|gpu,build|torch DDP (and ZeRO) over "ringlet" on CUDA against torch DDP over "nccl" (ringlet'"'"'s libnccl.so.2: NCCL itself refuses 2 ranks on 1 GPU) and over "gloo": tests/python/backend_ddp.py --device cuda
ddp-bench|160|gpu,build|perf/ddp_bench.sh on CUDA at 2 and 4 ranks (issue 14'"'"'s goals)
device-bench|220|gpu,build|perf/device_bench.sh -p 3: device vs host buffers over tcp and shm, PyTorch Gloo on CUDA, 2 and 4 ranks, 64 MiB
ipc-bench|190|gpu,build|perf/ipc_bench.sh -m off: cuda_ipc busbw against the memory floors at 2 and 4 ranks, 8-byte latency
ipc-bench-mps|190|gpu,build|perf/ipc_bench.sh -m on: the same under MPS
tcp-bench|300|build|perf/compare on the 16 cores (no GPU): ringlet-tcp against PyTorch Gloo, Gloo, Open MPI TCP, 2 and 4 ranks, 64 MiB and 8 B
nccl-tests|180|gpu,build|nccl-tests from $NCCL_TESTS_SRC built against ringlet'"'"'s nccl.h and libnccl.so.2, then all_reduce_perf -g 1 -t 2
host-suite|1200|build|tests/run.sh: the CI suite (in no group: see tests/gpu/README.md)
selftest-hang|3|-|sleeps past its budget: shows that a hang costs its own step only (tests/mp/gpu_suite.sh)
'
QUICK="preflight build test_kernels-quick collectives-p2-ipc collectives-p2-shm stream-p2 torch-nccl-p2 ipc-p4 ipc-p4-mps bench"
TESTS_ONLY="preflight test_kernels-quick collectives-p2-ipc collectives-p2-shm stream-p2 torch-nccl-p2 ipc-p4 ipc-p4-mps"
# Groups: each starts with preflight and build (a no-op where the build is there).
GROUP=([1]="preflight build test_kernels memcheck device-stream device-batch"
    [2]="preflight build device-collectives-ipc device-collectives-shm"
    [3]="preflight build device-collectives-tcp device-ipc-p8"
    [4]="preflight build device-mps device-more device-nccl"
    [5]="preflight build device-memcheck device-ddp"
    [6]="preflight build torch-nccl ddp-cuda-p2 ddp-cuda-p4"
    [7]="preflight build torch-backend-ops-p2 torch-backend-ddp-p2"
    [8]="preflight build ddp-bench device-bench"
    [9]="preflight build ipc-bench ipc-bench-mps"
    [10]="preflight build tcp-bench"
    [11]="preflight build nccl-tests")
NGROUPS=${#GROUP[@]}
GROUP_TITLE=([1]="kernels, sanitizer, stream, batch" [2]="device collectives over cuda_ipc and shm"
    [3]="device collectives over tcp, 8 ranks" [4]="MPS, the API layers" [5]="sanitizer on collectives, DDP"
    [6]="PyTorch" [7]="the torch backend \"ringlet\" on CUDA" [8]="benchmarks: DDP, device vs host"
    [9]="benchmarks: cuda_ipc, with and without MPS" [10]="benchmark: TCP on the cores" [11]="nccl-tests")
QUICK_LIMIT=360 GROUP_LIMIT=480

declare -A BUDGET NEEDS DESC
ALL_STEPS=()
while IFS='|' read -r n b nd d; do
    [ -n "$n" ] || continue
    BUDGET[$n]=$b NEEDS[$n]=$nd DESC[$n]=$d
    ALL_STEPS+=("$n")
done <<<"$STEP_TABLE"

export BUILD="${BUILD:-build}"
GB="$BUILD/tests/gpu"
LOGDIR="$GB/logs"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export CUDA_HOME GB LOGDIR

# ---------------------------------------------------------------------------------------------
# The steps' bodies, each run as `bash tests/gpu/run.sh --exec-step NAME` under its timeout.
# Exit 0 = PASS, 77 = SKIP (a line saying SKIP and why), else FAIL.

skip() { echo "SKIP: $*"; exit 77; }
need_sanitizer() { [ -n "$SANITIZER" ] || skip "compute-sanitizer not found"; }
need_torch_cuda() { # one import of torch (seconds)
    "$PY" -c "import torch, sys
print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'available:', torch.cuda.is_available())
sys.exit(0 if torch.cuda.is_available() else 1)" 2>&1 || skip "no CUDA build of torch for $PY, or it sees no GPU (set PYTHON)"
}
build_program() { # test_kernels | gpu_kernels_bench
    [ -n "$NVCC" ] || skip "no nvcc (set NVCC or CUDA_HOME)"
    bash tests/gpu/build_programs.sh --out "$GB" "$1" || exit 1
}
# A program that skips (77) where CUDA cannot run fails here: nvidia-smi listed a GPU.
gpu_must_run() {
    "$@"
    local rc=$?
    if [ $rc = 77 ]; then
        echo "FAIL: it skipped, but nvidia-smi lists a GPU here ($GPU_INFO): CUDA does not work"
        return 1
    fi
    return $rc
}
cuda_env() { gpu_must_run env RINGLET_TEST_DEVICE=cuda BUILD="$BUILD" "$@"; }

step_preflight() {
    echo "host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) memory, kernel $(uname -r)"
    local commit="? (no git here)"
    if git rev-parse --git-dir >/dev/null 2>&1; then
        commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- 2>/dev/null || echo ' (with local changes)')
    fi
    echo "commit: $commit"
    echo "nvcc: ${NVCC:-none}${NVCC:+ ($("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))}"
    echo "compute-sanitizer: ${SANITIZER:-none}"
    echo "cc: $(${CC:-cc} --version 2>/dev/null | head -n 1); $(ldd --version 2>/dev/null | head -n 1)"
    echo "environment: $(env | grep -E '^(CUDA|NCCL|TORCH|LD_PRELOAD|LD_LIBRARY_PATH|PYTHON)' | tr '\n' ' ')"
    echo "NCCL variables ringlet would read, unset for the suite: ${NCCL_SET_ASIDE:-none}"
    if command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
        echo "MPS control: $(command -v nvidia-cuda-mps-control)"
    else
        echo "MPS control: absent (nvidia-cuda-mps-control not found): the MPS steps skip"
    fi
    echo "RINGLET_TIMEOUT=$RINGLET_TIMEOUT; BUILD=$BUILD; results to $OUT"
    [ "$HAVE_GPU" = 1 ] || skip "no GPU usable here ($GPU_INFO)"
    local q
    # each nvidia-smi bounded well inside the step's budget (one may take seconds to wake the
    # driver where persistence mode is off)
    if ! q=$(timeout 8 nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used,compute_mode,persistence_mode,pci.bus_id \
        --format=csv 2>&1); then
        echo "FAIL: nvidia-smi --query-gpu: $q"
        exit 1
    fi
    echo "$q"
    echo "CUDA (driver): $(timeout 3 nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -n 1)"
    echo "MIG mode: $(timeout 3 nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader 2>/dev/null | head -n 1)"
    echo "GPU processes now:"
    timeout 3 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null | sed 's/^/    /'
    case $(tail -n +2 <<<"$q" | head -n 1) in
    *Prohibited*) echo "FAIL: compute mode Prohibited: no CUDA context can be made"; exit 1 ;;
    *Exclusive_Process*) echo "WARN: compute mode Exclusive_Process: several ranks on one GPU need MPS" ;;
    esac
    echo "ok:   preflight"
}

step_build() {
    if ! make -j16 BUILD="$BUILD"; then # -j16 interleaves: the errors, whatever the tail shows
        echo "FAIL: make: $(grep -m10 -E 'error|undefined reference|\*\*\*' "$LOGDIR/build.log" 2>/dev/null | tr '\n' ' ' | cut -c1-600)"
        exit 1
    fi
    if [ -n "$NVCC" ] && [ ! -f "$BUILD/obj/kernels/reduce_cuda.o" ]; then
        echo "FAIL: nvcc is here but the Makefile did not build kernels/reduce_cuda.cu"
        exit 1
    fi
    [ -n "$NVCC" ] || echo "note: no nvcc: a host-only build (the device steps cannot run)"
    echo "ok:   build"
}

step_test_kernels_quick() { build_program test_kernels && gpu_must_run "$GB/test_kernels" --max-n 262147; }
step_test_kernels() { build_program test_kernels && gpu_must_run "$GB/test_kernels"; }
step_memcheck() {
    need_sanitizer
    build_program test_kernels
    gpu_must_run "$SANITIZER" --tool memcheck --error-exitcode 1 "$GB/test_kernels" --max-n 4099
}
step_bench() { build_program gpu_kernels_bench && gpu_must_run "$GB/gpu_kernels_bench"; }

# collectives.sh on device memory over the cuda backend: transport(s), then env assignments
collectives_cuda() {
    local trs=$1
    shift
    cuda_env RINGLET_TEST_MEMORY=device RINGLET_TEST_DEVICE_TRANSPORTS="$trs" "$@" bash tests/mp/collectives.sh
}
step_collectives_p2_ipc() { collectives_cuda ipc RINGLET_COLLECTIVES_PLAN=quick; }
step_collectives_p2_shm() { collectives_cuda shm RINGLET_COLLECTIVES_PLAN=quick; }
step_ipc_p4() { # both runs, whatever the first one did
    local a b
    collectives_cuda ipc RINGLET_COLLECTIVES_PLAN=quick-p4
    a=$?
    collectives_cuda ipc RINGLET_COLLECTIVES_PLAN=quick-p4 CUDA_DEVICE_MAX_CONNECTIONS=1
    b=$?
    [ $a = 0 ] && [ $b = 0 ]
}
step_ipc_p4_mps() { bash tests/gpu/mps.sh env RINGLET_COLLECTIVES_PLAN=quick-p4 RINGLET_TEST_DEVICE=cuda BUILD="$BUILD" \
    RINGLET_TEST_MEMORY=device RINGLET_TEST_DEVICE_TRANSPORTS=ipc bash tests/mp/collectives.sh; }
step_device_collectives_ipc() { collectives_cuda ipc; }
step_device_collectives_shm() { collectives_cuda shm; }
step_device_collectives_tcp() { collectives_cuda tcp; }
step_device_mps() { bash tests/gpu/mps.sh env RINGLET_TEST_DEVICE=cuda BUILD="$BUILD" RINGLET_TEST_MEMORY=device \
    RINGLET_TEST_DEVICE_TRANSPORTS=ipc bash tests/mp/collectives.sh; }
step_stream_p2() { cuda_env RINGLET_TEST_TRANSPORTS="ipc shm" STREAM_KERNEL_CASES=order STREAM_SYNC_CASES=order STREAM_THREAD_HOLDS= \
    STREAM_RUN_LIMIT=20 STREAM_RUN_GRACE=2 bash tests/mp/stream.sh; }
step_device_stream() { cuda_env bash tests/mp/stream.sh; }
step_device_batch() { cuda_env bash tests/mp/batch.sh; }
step_device_more() { cuda_env bash tests/mp/more.sh; }
step_device_nccl() { cuda_env bash tests/mp/nccl.sh; }
step_device_ddp() { cuda_env bash tests/mp/ddp.sh; }

step_device_ipc_p8() {
    local out="$LOGDIR/p8.out" rc n
    RINGLET_DEVICE=cuda RINGLET_DEBUG=INFO "$BUILD/bin/ringlet-run" -n 8 --timeout 600 "$BUILD/tests/mp/collectives" \
        --memory device --quick --max-count 100003 >"$out" 2>&1
    rc=$?
    grep -vE ' INFO: ' "$out" | tail -n 30
    n=$(grep -c 'over cuda_ipc (device buffers)' "$out")
    echo "cuda_ipc connections: $n"
    [ $rc = 0 ] && [ "$n" -gt 0 ]
}

step_device_memcheck() {
    need_sanitizer
    RINGLET_DEVICE=cuda RINGLET_TIMEOUT=120 "$BUILD/bin/ringlet-run" -n 2 --timeout 600 "$SANITIZER" --tool memcheck \
        --error-exitcode 99 --print-limit 20 "$BUILD/tests/mp/collectives" --memory device --quick --max-count 4099
}

torch_nccl_at() { # rank counts...
    need_torch_cuda
    local fails=0 n rc ok log
    for n in "$@"; do
        log="$LOGDIR/torch_nccl.$n"
        LD_PRELOAD="$PWD/$BUILD/lib/libnccl.so.2" RINGLET_NCCL_LIB="$PWD/$BUILD/lib/libnccl.so.2" NCCL_DEBUG=INFO \
            RINGLET_DEVICE=cuda PYTHONUNBUFFERED=1 \
            "$BUILD/bin/ringlet-run" -n "$n" --timeout 600 "$PY" tests/gpu/torch_nccl.py >"$log" 2>&1
        rc=$?
        grep -E 'torch_nccl:|FAIL|Traceback|Error' "$log" | head -n 20
        grep -m1 -E 'NCCL INFO \[ringlet.*communicator up' "$log"
        ok=$(grep -c 'checks, 0 failed' "$log")
        # ringlet's own line from every rank's first communicator: torch ran on it
        up=$(grep -cE 'NCCL INFO \[ringlet.*rank [0-9]+ of '"$n"': communicator up' "$log")
        if [ $rc = 0 ] && [ "$ok" = "$n" ] && [ "$up" -ge "$n" ]; then
            echo "ok:   torch_nccl at $n ranks"
        else
            echo "FAIL: torch_nccl at $n ranks: launcher exit $rc, $ok of $n ranks passed, $up ringlet communicators up"
            tail -n 30 "$log"
            fails=$((fails + 1))
        fi
    done
    [ $fails = 0 ]
}
step_torch_nccl_p2() { torch_nccl_at 2; }
step_torch_nccl() { torch_nccl_at 2 4; }

ddp_cuda_at() { # rank count
    need_torch_cuda
    local n=$1 log="$LOGDIR/ddp_cuda.$1" store="$LOGDIR/store.$1" rc
    rm -f "$store"
    LD_PRELOAD="$PWD/$BUILD/lib/libnccl.so.2" RINGLET_DEVICE=cuda PYTHONPATH="$PWD/python" \
        RINGLET_LIBRARY="$PWD/$BUILD/lib/libringlet.so" "$BUILD/bin/ringlet-run" -n "$n" --timeout 600 \
        "$PY" tests/python/ddp_vs_torch.py --device cuda --nccl --store "$store" >"$log" 2>&1
    rc=$?
    grep -E 'ddp_vs_torch|FAIL|Traceback' "$log" | head -n 40
    [ $rc = 0 ] || { tail -n 30 "$log"; return 1; }
}
step_ddp_cuda_p2() { ddp_cuda_at 2; }
step_ddp_cuda_p4() { ddp_cuda_at 4; }

backend_cuda() { # log-name pattern-of-a-passing-rank script args...: 2 ranks, device cuda
    need_torch_cuda
    local name=$1 pat=$2 log="$LOGDIR/$1" rc ok
    shift 2
    RINGLET_DEVICE=cuda PYTHONPATH="$PWD/python" RINGLET_LIBRARY="$PWD/$BUILD/lib/libringlet.so" PYTHONUNBUFFERED=1 \
        "$BUILD/bin/ringlet-run" -n 2 --timeout 600 "$PY" "$@" >"$log" 2>&1
    rc=$?
    grep -E 'backend_|FAIL|Traceback|Error' "$log" | head -n 40
    ok=$(grep -cE "$pat" "$log")
    if [ $rc = 0 ] && [ "$ok" = 2 ]; then
        echo "ok:   $name"
    else
        echo "FAIL: $name: launcher exit $rc, $ok of 2 ranks passed"
        tail -n 30 "$log"
        return 1
    fi
}
step_torch_backend_ops_p2() {
    backend_cuda backend_ops.cuda 'backend_ops: rank [01]: [0-9]+ checks, 0 failed' \
        tests/python/backend_ops.py --device cuda
}
step_torch_backend_ddp_p2() {
    # "nccl" here is torch's ProcessGroupNCCL over ringlet's libnccl.so.2 (LD_PRELOAD): NVIDIA's
    # NCCL refuses two ranks on one GPU; Gloo (CUDA tensors staged through the host) is the
    # reference that shares no code with ringlet. Gloo's half first, and both whatever the
    # first gave: the nccl half also depends on torch loading ringlet's libnccl.so.2
    local rc=0
    backend_cuda backend_ddp.cuda.gloo 'backend_ddp: rank [01]: PASS' \
        tests/python/backend_ddp.py --device cuda --ref gloo --configs bn,unused,bucket_view,zero || rc=1
    LD_PRELOAD="$PWD/$BUILD/lib/libnccl.so.2" backend_cuda backend_ddp.cuda.nccl 'backend_ddp: rank [01]: PASS' \
        tests/python/backend_ddp.py --device cuda --ref nccl --configs bn,unused,no_sync,bucket_view,comm_hook,zero ||
        rc=1
    return $rc
}

step_ddp_bench() {
    need_torch_cuda
    local n
    for n in 2 4; do
        LD_PRELOAD="$PWD/$BUILD/lib/libnccl.so.2" RINGLET_DEVICE=cuda PYTHON="$PY" \
            bash perf/ddp_bench.sh -n $n --device cuda --modes none,torch,ringlet,nccl --rounds 4 || return 1
    done
}
step_device_bench() { env BUILD="$BUILD" PYTHON="$PY" bash perf/device_bench.sh -p 3 -o "$GB/device_bench"; }
step_ipc_bench() { env BUILD="$BUILD" bash perf/ipc_bench.sh -p 3 -m off -o "$GB/ipc_bench"; }
step_ipc_bench_mps() {
    command -v nvidia-cuda-mps-control >/dev/null 2>&1 || skip "nvidia-cuda-mps-control not found"
    env BUILD="$BUILD" bash perf/ipc_bench.sh -p 3 -m on -o "$GB/ipc_bench_mps"
}
step_tcp_bench() {
    env BUILD="$BUILD" RANKS="2 4" SIZES=64M TRANSPORTS=tcp PEERS="gloo-torch gloo mpi-tcp" PASSES=3 \
        TORCH_PYTHON="$PY" OUT="$GB/tcp_compare" bash perf/compare
}
step_nccl_tests() { bash tests/gpu/nccl_tests.sh; }
step_host_suite() { env BUILD="$BUILD" bash tests/run.sh; }
step_selftest_hang() {
    echo "selftest-hang: sleeping past the budget, in a child and a grandchild"
    bash -c "sleep ${RINGLET_GPU_SELFTEST_SLEEP:-3600}" &
    sleep "${RINGLET_GPU_SELFTEST_SLEEP:-3600}"
}

# ---------------------------------------------------------------------------------------------
# Options

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die_usage() { echo "tests/gpu/run.sh: $*" >&2; echo "(tests/gpu/run.sh --help; --list shows the steps)" >&2; exit 2; }
has_step() { [ -n "${BUDGET[$1]+x}" ]; }
fn_of() { echo "step_${1//-/_}"; }

SEL=() list=0 dry=0 exec_step="" ARGS="$*"
add_sel() { local s; for s in "$@"; do SEL+=("$s"); done; }
while [ $# -gt 0 ]; do
    case $1 in
    --quick) add_sel $QUICK ;;
    --tests-only) add_sel $TESTS_ONLY ;;
    --all)
        add_sel $QUICK
        for g in $(seq 1 "$NGROUPS"); do add_sel ${GROUP[$g]}; done ;;
    --group | --groups)
        [ $# -ge 2 ] || die_usage "--group needs a number"
        for g in ${2//,/ }; do
            [[ $g =~ ^[0-9]+$ ]] && [ "$g" -ge 1 ] && [ "$g" -le "$NGROUPS" ] || die_usage "no group '$g' (1..$NGROUPS)"
            add_sel ${GROUP[$g]}
        done
        shift ;;
    --steps)
        [ $# -ge 2 ] || die_usage "--steps needs a list"
        for s in ${2//,/ }; do
            has_step "$s" || die_usage "no step '$s'"
            add_sel "$s"
        done
        shift ;;
    --list) list=1 ;;
    --dry-run) dry=1 ;;
    --exec-step) exec_step=${2:-}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die_usage "unknown option $1" ;;
    esac
    shift
done

# Inside a step's own process (environment from the parent below).
if [ -n "$exec_step" ]; then
    has_step "$exec_step" || die_usage "no step '$exec_step'"
    # At the budget (timeout's TERM to the whole group) this shell waits for the command in
    # the foreground to end (collectives.sh and stream.sh then say which run was cut, and
    # what its ranks printed) and exits, before run_step writes to the log: the step's
    # processes are gone when the next step starts (timeout's KILL bounds the wait).
    trap 'exit 143' TERM
    "$(fn_of "$exec_step")"
    exit $?
fi

list_tier() { # title limit steps...
    local title=$1 limit=$2 s tot=0
    shift 2
    for s in "$@"; do tot=$((tot + BUDGET[$s])); done
    if [ "$limit" = none ]; then echo "$title:"; else echo "$title: $tot s of budgets (limit $limit s)"; fi
    for s in "$@"; do printf '  %-24s %5d s  %-11s  %s\n' "$s" "${BUDGET[$s]}" "[${NEEDS[$s]}]" "${DESC[$s]}"; done
}
if [ $list = 1 ]; then
    echo "tests/gpu/run.sh: steps by tier; a step's budget is the most it may take; [needs]: gpu = skipped without a GPU,"
    echo "build = needs make's output (a group builds first; --steps adds the build step first, a no-op when current)"
    # shellcheck disable=SC2086
    list_tier "quick (--quick)" $QUICK_LIMIT $QUICK
    for g in $(seq 1 "$NGROUPS"); do
        # shellcheck disable=SC2086
        list_tier "group $g (--group $g): ${GROUP_TITLE[$g]}" $GROUP_LIMIT ${GROUP[$g]}
    done
    in_tier=" $QUICK "
    for g in $(seq 1 "$NGROUPS"); do in_tier+=" ${GROUP[$g]} "; done
    others=()
    for s in "${ALL_STEPS[@]}"; do [[ $in_tier == *" $s "* ]] || others+=("$s"); done
    [ ${#others[@]} -gt 0 ] && list_tier "in no tier (run it with --steps)" none "${others[@]}"
    exit 0
fi

[ ${#SEL[@]} -gt 0 ] || add_sel $QUICK
# each step once, in the order chosen
STEPS=()
declare -A seen
for s in "${SEL[@]}"; do
    [ -n "${seen[$s]+x}" ] && continue
    seen[$s]=1
    STEPS+=("$s")
done

# ---------------------------------------------------------------------------------------------
# What this machine has (exported to the steps)

NVCC=${NVCC:-$(command -v nvcc 2>/dev/null || { [ -x "$CUDA_HOME/bin/nvcc" ] && echo "$CUDA_HOME/bin/nvcc"; })}
GPU_ARCH=${GPU_ARCH:-"-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"}
SANITIZER=$(command -v compute-sanitizer 2>/dev/null ||
    { [ -n "$NVCC" ] && [ -x "$(dirname "$NVCC")/compute-sanitizer" ] && echo "$(dirname "$NVCC")/compute-sanitizer"; } ||
    { [ -x "$CUDA_HOME/bin/compute-sanitizer" ] && echo "$CUDA_HOME/bin/compute-sanitizer"; })
PY=${PYTHON:-python3}
HAVE_GPU=0 GPU_INFO="no nvidia-smi"
if [ "${RINGLET_GPU_NONE:-0}" = 1 ]; then
    GPU_INFO="none (RINGLET_GPU_NONE=1)"
elif command -v nvidia-smi >/dev/null 2>&1; then
    if GPU_INFO=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1) &&
        [ -n "$GPU_INFO" ]; then
        HAVE_GPU=1 GPU_INFO=$(head -n 1 <<<"$GPU_INFO")
    else
        GPU_INFO="nvidia-smi lists none: $(head -n 1 <<<"$GPU_INFO")"
    fi
fi
OUT=${RINGLET_GPU_OUT:-${OUT:-$GB}} # the device machine's $OUT where RINGLET_GPU_OUT is not set
export RINGLET_TIMEOUT=${RINGLET_TIMEOUT:-20}
# tests/mp/gpu.sh (run by `make test`, as host-suite does) skips itself while this script runs.
export RINGLET_GPU_RUN_ACTIVE=1
export NVCC GPU_ARCH SANITIZER PY HAVE_GPU GPU_INFO OUT

needs() { [[ ,${NEEDS[$1]}, == *",$2,"* ]]; }
# --steps: the build first when a step that will run needs it, also when build/ has its
# outputs: a warm machine keeps them, and a rerun after a fix must not test the old ones
# (make is a no-op when they are current)
if [ -z "${seen[build]+x}" ]; then
    for s in "${STEPS[@]}"; do
        if needs "$s" build && { [ $HAVE_GPU = 1 ] || ! needs "$s" gpu; }; then
            STEPS=(build "${STEPS[@]}")
            break
        fi
    done
fi

total=0
for s in "${STEPS[@]}"; do total=$((total + BUDGET[$s])); done
if [ $dry = 1 ]; then
    for s in "${STEPS[@]}"; do printf '%-24s %5d s\n' "$s" "${BUDGET[$s]}"; done
    echo "total: $total s of budgets"
    exit 0
fi

# ---------------------------------------------------------------------------------------------
# Running the steps

mkdir -p "$LOGDIR" "$OUT" || exit 1
RESULTS="$OUT/results.txt" SUMMARY="$OUT/summary.txt"

started=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
HEADER="tests/gpu/run.sh${ARGS:+ $ARGS} started $started; GPU: $GPU_INFO; commit $(git rev-parse --short HEAD 2>/dev/null || echo ?); ${#STEPS[@]} steps, $total s of budgets"
R_NAME=() R_RES=() R_TIME=() R_NOTE=()
npass=0 nfail=0 nskip=0

totals_line() { echo "$npass passed, $nfail failed, $nskip skipped"; }
write_summary() { # index of the next step (or -1 when done)
    local next=$1 i
    {
        echo "$HEADER"
        printf '%-24s %-6s %6s %7s  %s\n' step result time budget note
        for i in "${!R_NAME[@]}"; do
            printf '%-24s %-6s %5ds %6ds  %s\n' "${R_NAME[$i]}" "${R_RES[$i]}" "${R_TIME[$i]}" "${BUDGET[${R_NAME[$i]}]}" "${R_NOTE[$i]}"
        done
        if [ "$next" -ge 0 ]; then
            echo "(running ${STEPS[$next]}; not run yet: ${STEPS[*]:$((next + 1))})"
        fi
        totals_line
    } >"$SUMMARY.tmp" && mv -f "$SUMMARY.tmp" "$SUMMARY"
}
record() { # name result seconds note log
    local name=$1 res=$2 secs=$3 note=$4 log=$5 line
    R_NAME+=("$name") R_RES+=("$res") R_TIME+=("$secs") R_NOTE+=("$note")
    case $res in PASS) npass=$((npass + 1)) ;; FAIL) nfail=$((nfail + 1)) ;; *) nskip=$((nskip + 1)) ;; esac
    line=$(printf '%-4s %-24s %4ds of %4ds%s' "$res" "$name" "$secs" "${BUDGET[$name]}" "${note:+  $note}")
    echo "$line"
    {
        echo "$line"
        if [ -n "$log" ] && [ -s "$log" ]; then
            local n=20
            if [ "$res" = FAIL ]; then
                n=60 # the first failures first: a long tail can push them out
                echo "    ---- first FAIL lines of $log"
                grep -m20 -aE '(^|\] )FAIL' "$log" | cut -c1-400 | sed 's/^/    | /'
            fi
            echo "    ---- last $n lines of $log"
            tail -n $n "$log" | cut -c1-400 | sed 's/^/    | /'
        fi
    } >>"$RESULTS"
    save_logs # a kill of the whole run keeps what was done
}
save_logs() {
    tar -czf "$OUT/logs.tar.gz.tmp" -C "$GB" logs 2>/dev/null && mv -f "$OUT/logs.tar.gz.tmp" "$OUT/logs.tar.gz"
    rm -f "$OUT/logs.tar.gz.tmp"
}

run_step() { # index
    local i=$1 name=${STEPS[$1]}
    local budget=${BUDGET[$name]} log="$LOGDIR/$name.log" t0=$SECONDS rc res note="" tmp=""
    write_summary "$i"
    echo
    echo "== $name ($budget s): ${DESC[$name]}"
    if needs "$name" gpu && [ $HAVE_GPU = 0 ]; then
        record "$name" SKIP 0 "SKIP: no GPU ($GPU_INFO)" ""
        return
    fi
    # MPS steps start the daemon under a private TMPDIR, so that one a timeout left behind can be
    # stopped here (the MPS pipe's path must stay short: /tmp).
    if [[ $name == *mps* ]]; then
        tmp=$(mktemp -d /tmp/rlgpu.XXXXXX)
    fi
    # SIGTERM at budget - grace, SIGKILL at the budget (1 s of grace for the tiny budgets)
    local grace=5
    [ "$budget" -lt 20 ] && grace=1
    touch "$LOGDIR/.step-start"
    TMPDIR=${tmp:-${TMPDIR:-/tmp}} timeout --kill-after=$grace $((budget - grace)) bash "$SELF" --exec-step "$name" \
        >"$log" 2>&1
    rc=$?
    case $rc in
    0) res=PASS ;;
    77) res=SKIP note=$(grep -m1 'SKIP' "$log" | cut -c1-200) ;;
    124 | 137) res=FAIL note="timed out after ${budget}s" ;;
    *) res=FAIL note="exit $rc" ;;
    esac
    if [ $res = FAIL ]; then
        local first
        first=$(grep -m1 -aE '(^|\] )FAIL' "$log" | cut -c1-160)
        [ -n "$first" ] && note+=": $first"
    fi
    if [ -n "$tmp" ]; then
        local p
        for p in "$tmp"/*/pipe; do
            [ -e "$p/control" ] || continue
            echo "run.sh: stopping the MPS daemon left in $p" >>"$log"
            echo quit | CUDA_MPS_PIPE_DIRECTORY=$p timeout 5 nvidia-cuda-mps-control >>"$log" 2>&1
        done
        rm -rf "$tmp"
    fi
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        {
            echo "run.sh: $name timed out after ${budget}s; GPU processes now:"
            timeout 5 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>&1
            # the step's own logs (the ranks' output of torch_nccl, p8), which the kill left unread
            local f
            for f in $(find "$LOGDIR" -maxdepth 1 -type f -newer "$LOGDIR/.step-start" ! -name "$name.log" 2>/dev/null); do
                echo "run.sh: last lines of $f (INFO left out):"
                grep -av ' INFO' "$f" | tail -n 40 | cut -c1-300
            done
        } >>"$log"
    fi
    # on the terminal: the lines that say how it went (the whole log is in $log)
    grep -aE '^(ok|FAIL|SKIP|PASS|MISS|WARN)|all passed|[0-9]+ failed|failures|GB/s|^\| ' "$log" | head -n 25 | cut -c1-300
    [ $res = FAIL ] && tail -n 25 "$log" | cut -c1-300 | sed 's/^/    | /'
    record "$name" $res $((SECONDS - t0)) "$note" "$log"
}

{
    echo
    echo "== $HEADER"
} >>"$RESULTS"
echo "== $HEADER"
echo "   results: $RESULTS (and summary.txt beside it); logs: $LOGDIR"
for i in "${!STEPS[@]}"; do run_step "$i"; done
write_summary -1
totals_line >>"$RESULTS"
save_logs
echo
cat "$SUMMARY"
[ $nfail -gt 0 ] && exit 1
[ $npass -eq 0 ] && exit 77
exit 0

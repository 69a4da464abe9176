#!/usr/bin/env bash
# Builds the GPU programs that test and measure kernels/ on their own (no libringlet):
#   test_kernels        tests/gpu/test_kernels.cu
#   gpu_kernels_bench   perf/gpu_kernels_bench.cu
# each linked with kernels/reduce_cuda.cu, kernels/convert_cuda.cu, kernels/reduce_cpu.c and
# kernels/convert_cpu.c.
#
#   tests/gpu/build_programs.sh [--out DIR] PROGRAM...
#
# The CUDA kernels' object is the library build's ($BUILD/obj/kernels/reduce_cuda.o, as make
# built it) when it is there and newer than its source, so the suite does not compile the
# kernels twice; otherwise it is compiled here. The C objects are compiled here, without
# the sanitizer flags a sanitizer build would give them. Compiler output (warnings
# included) goes to stdout; tests/mp/gpu_programs.sh fails on a warning.
# Environment: BUILD (default build), NVCC (default: nvcc on PATH, else $CUDA_HOME/bin/nvcc),
#   GPU_ARCH (default: the Makefile's sm_80, sm_90 and compute_90 PTX), CC (default cc).
# Output: DIR/PROGRAM (default DIR: $BUILD/tests/gpu). Exit 0 = built, 1 = a build failed,
# 77 = no nvcc.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
OUTDIR="$BUILD/tests/gpu"
if [ "${1:-}" = --out ]; then
    OUTDIR=$2
    shift 2
fi
[ $# -gt 0 ] || { echo "usage: tests/gpu/build_programs.sh [--out DIR] test_kernels|gpu_kernels_bench..." >&2; exit 2; }
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$(command -v nvcc 2>/dev/null || { [ -x "$CUDA_HOME/bin/nvcc" ] && echo "$CUDA_HOME/bin/nvcc"; })}
[ -n "$NVCC" ] || { echo "SKIP: no nvcc (set NVCC or CUDA_HOME)"; exit 77; }
GPU_ARCH=${GPU_ARCH:-"-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"}
CC=${CC:-cc}
mkdir -p "$OUTDIR/obj"
O="$OUTDIR/obj"
# shellcheck disable=SC2206
arch=($GPU_ARCH)
# shellcheck disable=SC2054 # -Wall,-Wextra is one argument of -Xcompiler
nvflags=(-O3 -std=c++17 "${arch[@]}" -lineinfo -Iinclude -Ikernels -Xcompiler -Wall,-Wextra)

# Objects in parallel, then the links.
pids=()
"$CC" -std=c11 -O2 -g -D_GNU_SOURCE -Wall -Wextra -Iinclude -Ikernels -c kernels/reduce_cpu.c -o "$O/reduce_cpu.o" &
pids+=($!)
"$CC" -std=c11 -O2 -g -D_GNU_SOURCE -Wall -Wextra -Iinclude -Ikernels -c kernels/convert_cpu.c -o "$O/convert_cpu.o" &
pids+=($!)
cuda_objs=()
for cu in reduce_cuda convert_cuda; do
    obj="$BUILD/obj/kernels/$cu.o"
    if [ -f "$obj" ] && [ "$obj" -nt kernels/$cu.cu ] && [ "$obj" -nt kernels/reduce_cuda.h ] &&
        [ "$obj" -nt kernels/cuda_common.cuh ]; then
        echo "build_programs: kernels/$cu.cu: the library build's object ($obj)"
    else
        obj="$O/$cu.o"
        "$NVCC" "${nvflags[@]}" -c kernels/$cu.cu -o "$obj" &
        pids+=($!)
    fi
    cuda_objs+=("$obj")
done
for prog in "$@"; do
    case $prog in
    test_kernels) src=tests/gpu/test_kernels.cu ;;
    gpu_kernels_bench) src=perf/gpu_kernels_bench.cu ;;
    *) echo "build_programs: unknown program $prog" >&2; exit 2 ;;
    esac
    "$NVCC" "${nvflags[@]}" -c "$src" -o "$O/$prog.o" &
    pids+=($!)
done
st=0
for p in "${pids[@]}"; do wait "$p" || st=1; done
[ $st = 0 ] || { echo "build_programs: FAIL: a compilation failed"; exit 1; }
for prog in "$@"; do
    rm -f "$OUTDIR/$prog"
    "$NVCC" "${arch[@]}" "$O/$prog.o" "${cuda_objs[@]}" "$O/reduce_cpu.o" "$O/convert_cpu.o" -lm -o "$OUTDIR/$prog" ||
        { echo "build_programs: FAIL: linking $prog"; exit 1; }
    echo "build_programs: built $OUTDIR/$prog"
done
exit 0

#!/usr/bin/env bash
# nccl-tests, the benchmark NCCL users run first, on ringlet's libnccl.so.2: a nccl-tests source
# tree carried to the GPU machine (never committed here; tests/gpu/README.md says how) is built
# against ringlet's nccl.h (src/nccl) and libnccl.so.2 ($BUILD/lib), then
#   all_reduce_perf -b 8 -e 128M -f 4 -g 1 -t 2 -c 1
# runs: two threads of one process, each a rank with one GPU (the one GPU here), results checked.
#   NCCL_TESTS_SRC=/path/to/nccl-tests tests/gpu/nccl_tests.sh
# NVIDIA's libnccl (the CUDA toolkit has one) is neither linked nor loaded: the link searches
# ringlet's library folder before the toolkit's (nccl-tests' CUDA_LIB is given as both, ours
# first), ldd must show ringlet's library before anything runs, and the run has
# LD_LIBRARY_PATH on ringlet's folder.
# Passes when the build works, the run ends with "Out of bounds values : 0 OK" and ringlet's
# "communicator up" line is in its NCCL_DEBUG=INFO output.
# Environment: BUILD (default build), NCCL_TESTS_SRC, NVCC, CUDA_HOME (default /usr/local/cuda),
#   NCCL_TESTS_GENCODE (default: the GPU's compute capability from nvidia-smi, else sm_90).
# Writes under $BUILD/tests/gpu/nccl-tests. Exit 0 = passed, 1 = failed, 77 = no source tree,
# nvcc or GPU.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$(command -v nvcc 2>/dev/null || { [ -x "$CUDA_HOME/bin/nvcc" ] && echo "$CUDA_HOME/bin/nvcc"; })}
SRC=${NCCL_TESTS_SRC:-}
[ -n "$SRC" ] && [ -d "$SRC/src" ] ||
    { echo "SKIP: no nccl-tests source tree (set NCCL_TESTS_SRC to one carried along; tests/gpu/README.md)"; exit 77; }
[ -n "$NVCC" ] || { echo "SKIP: no nvcc"; exit 77; }
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || { echo "SKIP: no GPU"; exit 77; }
[ -f "$BUILD/lib/libnccl.so.2" ] || { echo "FAIL: $BUILD/lib/libnccl.so.2 not found (make first)"; exit 1; }
SRC=$(cd "$SRC" && pwd)
LIBDIR=$(cd "$BUILD/lib" && pwd)
OUTDIR="$PWD/$BUILD/tests/gpu/nccl-tests"
HOME_DIR="$OUTDIR/nccl-home" # NCCL_HOME for nccl-tests: ringlet's header and library only
rm -rf "$OUTDIR"
mkdir -p "$HOME_DIR/include" "$OUTDIR/bin"
ln -s "$PWD/src/nccl/nccl.h" "$HOME_DIR/include/nccl.h"
# the build's lib folder itself: libnccl.so (-lnccl) and the libringlet.so.0 it needs, found
# by the linker through libnccl.so.2's $ORIGIN run path
ln -s "$LIBDIR" "$HOME_DIR/lib"

cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
[[ $cc =~ ^[0-9]+$ ]] || cc=90
GENCODE=${NCCL_TESTS_GENCODE:-"-gencode=arch=compute_$cc,code=sm_$cc"}
echo "nccl_tests: source $SRC ($(git -C "$SRC" describe --tags 2>/dev/null || echo 'no git tag')); nvcc $NVCC; $GENCODE"
t0=$SECONDS
if ! make -C "$SRC/src" -j16 BUILDDIR="$OUTDIR/bin" NCCL_HOME="$HOME_DIR" CUDA_HOME="$CUDA_HOME" NVCC="$NVCC" \
    CUDA_LIB="$HOME_DIR/lib -L$CUDA_HOME/lib64" NVCC_GENCODE="$GENCODE" MPI=0 >"$OUTDIR/build.log" 2>&1; then
    echo "FAIL: nccl-tests does not build against ringlet's nccl.h / libnccl.so.2:"
    grep -m 20 -E 'error|undefined' "$OUTDIR/build.log"
    tail -n 20 "$OUTDIR/build.log"
    exit 1
fi
BIN="$OUTDIR/bin/all_reduce_perf"
[ -x "$BIN" ] || { echo "FAIL: the build made no $BIN"; tail -n 20 "$OUTDIR/build.log"; exit 1; }
progs=("$OUTDIR"/bin/*_perf)
echo "ok:   nccl-tests built in $((SECONDS - t0)) s (${#progs[@]} programs)"

export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
got=$(ldd "$BIN" | sed -n 's/^[[:space:]]*libnccl\.so\.2 => \([^ ]*\).*/\1/p')
if [ "$(readlink -f "$got")" != "$(readlink -f "$LIBDIR/libnccl.so.2")" ]; then
    echo "FAIL: all_reduce_perf would load libnccl.so.2 from '$got', not ringlet's $LIBDIR: not run"
    exit 1
fi
if ldd -r "$BIN" 2>&1 | grep 'undefined symbol'; then
    echo "FAIL: unresolved symbols in all_reduce_perf"
    exit 1
fi
echo "ok:   ldd: libnccl.so.2 => $got, every symbol resolved"

NCCL_DEBUG=INFO RINGLET_DEVICE=cuda "$BIN" -b 8 -e 128M -f 4 -g 1 -t 2 -c 1 >"$OUTDIR/all_reduce_perf.out" 2>&1
rc=$?
grep -vE 'NCCL INFO' "$OUTDIR/all_reduce_perf.out" | tail -n 40
up=$(grep -m1 'communicator up on ringlet' "$OUTDIR/all_reduce_perf.out")
if [ -n "$up" ]; then echo "$up"; else echo "no line of ringlet's saying that its communicator is up"; fi
if [ $rc = 0 ] && grep -qE 'Out of bounds values *: *0 OK' "$OUTDIR/all_reduce_perf.out" && [ -n "$up" ]; then
    echo "ok:   all_reduce_perf -g 1 -t 2 on ringlet's libnccl.so.2: results right"
    exit 0
fi
echo "FAIL: all_reduce_perf exit $rc (output in $OUTDIR/all_reduce_perf.out)"
exit 1

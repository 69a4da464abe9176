#!/usr/bin/env bash
# The GPU suite's own programs, checked where there is no GPU, so that a GPU run finds no
# build error: tests/gpu/build_programs.sh builds tests/gpu/test_kernels.cu and
# perf/gpu_kernels_bench.cu with nvcc (one architecture, sm_90, to keep it short), which must
# give no warning (-Wall -Wextra); then each must say "SKIP" and exit 77 where no GPU is
# usable (on a machine with one, tests/mp/gpu.sh runs them).
# Writes only under a temporary folder. Skips (77) where nvcc is absent.
# Exit 0 = passed, 1 = failed.
set -u
cd "$(dirname "$0")/../.." || exit 1
export BUILD=${BUILD:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$(command -v nvcc 2>/dev/null || { [ -x "$CUDA_HOME/bin/nvcc" ] && echo "$CUDA_HOME/bin/nvcc"; })}
[ -n "$NVCC" ] || { echo "SKIP: no nvcc (PATH, or \$CUDA_HOME/bin)"; exit 77; }
export NVCC
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-gpu-programs.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

GPU_ARCH="-gencode arch=compute_90,code=sm_90" bash tests/gpu/build_programs.sh --out "$TMP" \
    test_kernels gpu_kernels_bench >"$TMP/build.log" 2>&1
rc=$?
if [ $rc != 0 ]; then
    fail "tests/gpu/build_programs.sh exit $rc:"
    tail -n 40 "$TMP/build.log"
    exit 1
fi
if grep -iE 'warning' "$TMP/build.log" >"$TMP/warnings"; then
    fail "compiler warnings:"
    cat "$TMP/build.log"
else
    echo "ok:   test_kernels and gpu_kernels_bench build with nvcc $("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), no warning"
fi

# Where no GPU is usable each says SKIP and exits 77. Where one is, tests/mp/gpu.sh runs them.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "ok:   a GPU is here: tests/mp/gpu.sh runs these programs on it (not run twice)"
else
    for prog in test_kernels gpu_kernels_bench; do
        timeout --kill-after=5 60 "$TMP/$prog" >"$TMP/$prog.out" 2>&1
        rc=$?
        if [ $rc = 77 ] && grep -q '^SKIP' "$TMP/$prog.out"; then
            echo "ok:   $prog without a GPU: $(grep -m1 '^SKIP' "$TMP/$prog.out"), exit 77"
        else
            fail "$prog without a GPU: exit $rc (expected 77 and a line saying SKIP):"
            tail -n 10 "$TMP/$prog.out"
        fi
    done
fi
[ $fails = 0 ] && { echo "gpu_programs: all passed"; exit 0; }
echo "gpu_programs: $fails failed"
exit 1

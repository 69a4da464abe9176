#!/usr/bin/env bash
# ringlet's nccl.h in a CUDA program, as NCCL's own header is used: tests/nccl/half_types.cu
# includes nccl.h alone and uses half and __nv_bfloat16 (nccl-tests does, and failed to compile
# against ringlet's header with "identifier half is undefined" before nccl.h included
# cuda_fp16.h and cuda_bf16.h).
#   1. nvcc compiles it against src/nccl/nccl.h (with CUDA's headers, so nccl.h includes them),
#      -Wall -Wextra without a warning, and links it to ringlet's $BUILD/lib/libnccl.so.2 (by
#      path: NVIDIA's libnccl in the CUDA toolkit is never linked or loaded);
#   2. every symbol resolves (ldd -r) and libnccl.so.2 is ringlet's;
#   3. it runs: one rank on host buffers, float16 and bfloat16 through all-reduce, broadcast and
#      all-gather (no GPU needed).
# Skips (77) where nvcc is absent. Exit 0 = passed, 1 = failed.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$(command -v nvcc 2>/dev/null || { [ -x "$CUDA_HOME/bin/nvcc" ] && echo "$CUDA_HOME/bin/nvcc"; })}
LIB="$BUILD/lib/libnccl.so.2"
[ -n "$NVCC" ] || { echo "SKIP: no nvcc (PATH, or \$CUDA_HOME/bin)"; exit 77; }
[ -f "$LIB" ] || { echo "FAIL: $LIB not found (build first, or set BUILD)"; exit 1; }
if [ -n "${SANITIZE:-}" ]; then
    # nvcc's host compiler would need the sanitizer runtime, and this test checks a header.
    echo "SKIP: a sanitizer build (SANITIZE=$SANITIZE); the normal build runs this test"
    exit 77
fi
LIBDIR=$(cd "$BUILD/lib" && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-nccl-cuda-header.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# 1. compile against ringlet's header only (-Isrc/nccl), link ringlet's library by path
if "$NVCC" -std=c++17 -arch=sm_80 -Xcompiler -Wall,-Wextra -Isrc/nccl tests/nccl/half_types.cu \
    -Xlinker "$LIBDIR/libnccl.so.2" -Xlinker -rpath,"$LIBDIR" -o "$TMP/half_types" >"$TMP/build.log" 2>&1; then
    if grep -qiE 'warning' "$TMP/build.log"; then
        fail "warnings compiling tests/nccl/half_types.cu:"
        cat "$TMP/build.log"
    else
        echo "ok:   nvcc $("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'): tests/nccl/half_types.cu (half, __nv_bfloat16 from nccl.h alone) compiles and links to $LIB"
    fi
else
    fail "tests/nccl/half_types.cu does not build against src/nccl/nccl.h:"
    grep -m 10 -E 'error|undefined' "$TMP/build.log"
    echo "nccl_cuda_header: 1 failed"
    exit 1
fi

# 2. every symbol resolves, against ringlet's library
ldd -r "$TMP/half_types" >"$TMP/ldd" 2>&1
if grep -q 'undefined symbol' "$TMP/ldd"; then
    fail "unresolved symbols:"
    grep 'undefined symbol' "$TMP/ldd" | head -n 20
fi
got=$(sed -n 's/^[[:space:]]*libnccl\.so\.2 => \([^ ]*\).*/\1/p' "$TMP/ldd")
if [ "$(readlink -f "$got")" != "$(readlink -f "$LIB")" ]; then
    fail "libnccl.so.2 resolves to '$got', not ringlet's $LIB"
    echo "nccl_cuda_header: not run (it would load another libnccl)"
    exit 1
fi
[ $fails = 0 ] && echo "ok:   ldd -r: every symbol resolves; libnccl.so.2 => $got"

# 3. run it (host buffers, one rank)
if "$TMP/half_types" >"$TMP/out" 2>&1; then
    echo "ok:   $(tail -n 1 "$TMP/out")"
else
    fail "half_types failed:"
    tail -n 20 "$TMP/out"
fi
[ $fails = 0 ] && { echo "nccl_cuda_header: all passed"; exit 0; }
echo "nccl_cuda_header: $fails failed"
exit 1

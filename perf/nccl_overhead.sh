#!/usr/bin/env bash
# Per-call overhead of the NCCL layer (libnccl.so.2) over calling ringlet directly:
# perf/nccl_overhead.c at 8 bytes on host memory, the two alternating on the same ranks.
#   perf/nccl_overhead.sh [ranks (2)] [rounds (9)] [calls per round (20000)]
# The goal (issue 13): at most 1 us added per call.
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
[ -f "$BUILD/lib/libnccl.so.2" ] || { echo "nccl_overhead: build first (make)"; exit 1; }
BIN="$BUILD/perf/nccl_overhead"
mkdir -p "$BUILD/perf"
${CC:-cc} -std=c11 -O2 -Wall -Wextra -D_GNU_SOURCE -Iinclude -Isrc/nccl -DRINGLET_NCCL_NO_CUDA_HEADERS perf/nccl_overhead.c -o "$BIN" \
    -L"$BUILD/lib" -Wl,-rpath,"$(cd "$BUILD/lib" && pwd)" -l:libnccl.so.2 -lringlet || exit 1
"$BUILD/bin/ringlet-run" -n "${1:-2}" "$BIN" "${2:-9}" "${3:-20000}" | sed 's/^\[0\] //'

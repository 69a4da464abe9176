#!/usr/bin/env bash
# The backend "ringlet" in one run (not a test: prints figures):
#   1. ringlet-perf allreduce of 64 MiB (in-place busbw), 2. perf/backend_bench.py (64 MiB
#   through dist.all_reduce and through the C call on the backend's communicator; 8-byte
#   all_reduce through the backend and through Gloo), 3. ringlet-perf again; then the
#   backend's busbw against the mean of the two ringlet-perf runs (goal >= 0.90).
#   perf/backend_bench.sh [-n RANKS] [backend_bench.py options...]
# Environment: BUILD (default build), PYTHON (default /usr/bin/python3).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
N=2
if [ "${1:-}" = "-n" ]; then
    N=$2
    shift 2
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-backend-bench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export RINGLET_LIB="$PWD/$BUILD/lib/libringlet.so"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
perf() { # in-place busbw of a 64 MiB all-reduce
    "$BUILD/bin/ringlet-run" -n "$N" "$BUILD/bin/ringlet-perf" allreduce -M host -b 64M -e 64M -n 20 -w 5 -c 0 >"$TMP/perf" 2>&1
    grep -E '^\[0\] +67108864 ' "$TMP/perf" | awk '{print $13}'
}
p1=$(perf)
echo "backend_bench: ringlet-perf allreduce 64 MiB, $N ranks, in place: busbw $p1 GB/s"
"$BUILD/bin/ringlet-run" -n "$N" "$PYTHON" perf/backend_bench.py "$@" | sed -n 's/^\[0\] //p' | tee "$TMP/py"
p2=$(perf)
echo "backend_bench: ringlet-perf allreduce 64 MiB, $N ranks, in place: busbw $p2 GB/s (after)"
bb=$(awk '/RESULT big backend/ {for (i = 1; i <= NF; i++) if ($i == "busbw") print $(i + 1)}' "$TMP/py")
awk -v b="$bb" -v p1="$p1" -v p2="$p2" 'BEGIN {
    printf "backend_bench: 64 MiB all_reduce busbw: backend %.3f GB/s, ringlet-perf %.3f GB/s (mean of %.3f and %.3f): ratio %.3f (goal >= 0.90)\n",
        b, (p1 + p2) / 2, p1, p2, b / ((p1 + p2) / 2) }'

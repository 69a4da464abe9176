#!/usr/bin/env bash
# Runs perf/ddp_bench.py (ringlet DDP against torch DDP over Gloo, and no DDP) through
# ringlet-run. Not a test: prints the figures.
#   perf/ddp_bench.sh [-n RANKS] [ddp_bench.py options...]     e.g. perf/ddp_bench.sh -n 2 --view
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
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-ddp-bench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export RINGLET_LIB="$PWD/$BUILD/lib/libringlet.so"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
"$BUILD/bin/ringlet-run" -n "$N" "$PYTHON" perf/ddp_bench.py --store "$TMP/store" "$@"

#!/usr/bin/env bash
# The Python package (python/ringlet): the binding's collectives on torch tensors and
# numpy arrays (tests/python/ringlet_api.py, P = 1 and 3), misuse of the PyTorch DDP
# (tests/python/ddp_misuse.py, P = 2: different shapes at construction, a parameter
# that gets no gradient, a gradient reported twice: a clear error on every rank; and
# find_unused_parameters), and the example examples/ddp_cnn.py (P = 2, a few steps).
# Skips (77) when torch is not importable by $PYTHON (default /usr/bin/python3), and in a
# sanitizer build (SANITIZE set). Takes about 15 s. Exit 0 = passed, 1 = a failure.
set -u

BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
RUN="$BUILD/bin/ringlet-run"
if [ -n "${SANITIZE:-}" ]; then
    echo "SKIP: Python tests do not run in a sanitizer build (SANITIZE=$SANITIZE): python3 would need LD_PRELOAD of the sanitizer runtime"
    exit 77
fi
if ! "$PYTHON" -c "import torch" >/dev/null 2>&1; then
    echo "SKIP: torch is not importable by $PYTHON (apt install python3-torch)"
    exit 77
fi
LIB="$BUILD/lib/libringlet.so"
for f in "$RUN" "$LIB"; do
    if [ ! -e "$f" ]; then
        echo "FAIL: $f not found (build first, or set BUILD)"
        exit 1
    fi
done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-ddp-python.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export RINGLET_LIB="$PWD/$LIB"
export RINGLET_TIMEOUT=${RINGLET_TIMEOUT:-120}
export OMP_NUM_THREADS=1

fails=0
now_ms() { echo $(($(date +%s%N) / 1000000)); }
t_all=$(now_ms)
# name P pattern-of-a-good-line script args...
run() {
    local name=$1 P=$2 pat=$3 script=$4
    shift 4
    local t rc dt good
    t=$(now_ms)
    "$RUN" -n "$P" --timeout 600 "$PYTHON" "$script" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    dt=$(($(now_ms) - t))
    good=$(grep -cE "$pat" "$TMP/out")
    if [ $rc = 0 ] && [ "$good" = "$P" ]; then
        echo "ok:   $name P=$P ($((dt / 1000)).$((dt % 1000 / 100)) s)"
    else
        fails=$((fails + 1))
        echo "FAIL: $name P=$P: launcher exit status $rc, $good of $P ranks passed"
        grep -E "FAIL|Error|error" "$TMP/out" | head -n 40
        echo "----- last lines of output and stderr:"
        tail -n 15 "$TMP/out"
        tail -n 30 "$TMP/err"
        echo "-----"
    fi
}
run ringlet_api 1 'ringlet_api: rank [0-9]+: [0-9]+ checks, 0 failed' tests/python/ringlet_api.py
run ringlet_api 3 'ringlet_api: rank [0-9]+: [0-9]+ checks, 0 failed' tests/python/ringlet_api.py
run ddp_misuse 2 'rank [0-9]+: ddp_misuse: PASS' tests/python/ddp_misuse.py
grep -E '^\[0\] rank 0: ddp_misuse: (shapes|unused|twice): ringlet' "$TMP/out" | sed 's/^\[0\] rank 0: /      /'
run examples/ddp_cnn.py 2 'ddp_cnn: rank [0-9]+ of 2: .*equal to rank 0.s: yes' examples/ddp_cnn.py --steps 30 --batch 16
dt=$(($(now_ms) - t_all))
if [ $fails = 0 ]; then
    echo "ddp_python: all passed ($((dt / 1000)) s)"
    exit 0
fi
echo "ddp_python: $fails runs failed ($((dt / 1000)) s)"
exit 1

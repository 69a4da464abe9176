#!/usr/bin/env bash
# ringlet's PyTorch DDP (python/ringlet/torch.py) against the references:
#   1. tests/python/ddp_vs_torch.py at P = 2 and 4: linear layers + BatchNorm, a different
#      random init and data shard per rank, 20 SGD steps, >= 4 buckets, trained once with
#      torch's DistributedDataParallel over Gloo (FileStore) and once with ringlet's; final
#      parameters and buffers agree to 1e-5 (normwise relative, per tensor); also with
#      no_sync every other step and with gradient_as_bucket_view.
#   2. tests/python/ddp_single.py at P = 4: a model without BatchNorm, ringlet DDP against
#      one process on the concatenated batch, 1e-5 (with and without bucket views).
# Skips (77) when torch is not importable by $PYTHON (default /usr/bin/python3), and in a
# sanitizer build (SANITIZE set): the interpreter would need the sanitizer runtime
# preloaded. Takes about 25 s on a 2-core machine. Exit 0 = passed, 1 = a failure.
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
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-ddp-torch.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export RINGLET_LIB="$PWD/$LIB"
export RINGLET_TIMEOUT=${RINGLET_TIMEOUT:-120}
export OMP_NUM_THREADS=1

fails=0
now_ms() { echo $(($(date +%s%N) / 1000000)); }
t_all=$(now_ms)
run() { # name P script args...
    local name=$1 P=$2 script=$3
    shift 3
    local t rc dt
    t=$(now_ms)
    "$RUN" -n "$P" --timeout 600 "$PYTHON" "$script" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    dt=$(($(now_ms) - t))
    local good
    good=$(grep -cE "^\[[0-9]+\] rank [0-9]+: $name: PASS" "$TMP/out")
    if [ $rc = 0 ] && [ "$good" = "$P" ]; then
        echo "ok:   $name P=$P ($((dt / 1000)).$((dt % 1000 / 100)) s)"
        grep -E "^\[0\] rank 0: $name: " "$TMP/out" | grep -v PASS | sed 's/^\[0\] rank 0: /      /'
    else
        fails=$((fails + 1))
        echo "FAIL: $name P=$P: launcher exit status $rc, $good of $P ranks passed"
        grep -E "$name|FAIL|Error|error" "$TMP/out" | head -n 40
        echo "----- last lines of stderr:"
        tail -n 30 "$TMP/err"
        echo "-----"
    fi
}
run ddp_vs_torch 2 tests/python/ddp_vs_torch.py --store "$TMP/store2"
run ddp_vs_torch 4 tests/python/ddp_vs_torch.py --store "$TMP/store4"
run ddp_single 4 tests/python/ddp_single.py
dt=$(($(now_ms) - t_all))
if [ $fails = 0 ]; then
    echo "ddp_torch: all passed ($((dt / 1000)) s)"
    exit 0
fi
echo "ddp_torch: $fails runs failed ($((dt / 1000)) s)"
exit 1

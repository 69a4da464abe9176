#!/usr/bin/env bash
# The Python package (python/ringlet): the binding's collectives on torch tensors and
# numpy arrays (tests/python/ringlet_api.py, P = 1 and 3), misuse of the PyTorch DDP
# (tests/python/ddp_misuse.py, P = 2: different shapes at construction, a parameter
# that gets no gradient, a gradient reported twice: a clear error on every rank; and
# find_unused_parameters), the example examples/ddp_cnn.py (P = 2, a few steps), and a
# rank ending with an uncaught exception (tests/python/exit_raise.py: the other fails at once).
# Skips (77) when torch is not importable by $PYTHON (default /usr/bin/python3), and in a
# sanitizer build (SANITIZE set). Takes about 15 s. Exit 0 = passed, 1 = a failure.
set -u

source "$(dirname "$0")/lib/python.bash"
py_setup ddp-python
py_run ringlet_api 1 'ringlet_api: rank [0-9]+: [1-9][0-9]* checks, 0 failed' tests/python/ringlet_api.py
py_run ringlet_api 3 'ringlet_api: rank [0-9]+: [1-9][0-9]* checks, 0 failed' tests/python/ringlet_api.py
py_run ddp_misuse 2 'rank [0-9]+: ddp_misuse: PASS' tests/python/ddp_misuse.py
py_run examples/ddp_cnn.py 2 'ddp_cnn: rank [0-9]+ of 2: .*equal to rank 0.s: yes' examples/ddp_cnn.py --steps 30 --batch 16
# a rank that ends with an uncaught exception: the rank waiting for it fails at once,
# naming it, over ringlet's binding and over the torch backend (tests/python/exit_raise.py)
for mode in binding backend; do
    "$RUN" -n 2 --grace 60 --timeout 300 "$PYTHON" tests/python/exit_raise.py $mode >"$TMP/out" 2>"$TMP/err"
    if grep -q 'exit_raise: rank 0: OK' "$TMP/out" && grep -q 'rank 1 ends with an uncaught exception' "$TMP/err" "$TMP/out"; then
        echo "ok:   exit_raise $mode: $(grep -m1 -oE 'OK: .* after [0-9.]+ s' "$TMP/out")"
    else
        fails=$((fails + 1))
        echo "FAIL: exit_raise $mode"
        tail -n 10 "$TMP/out" "$TMP/err"
    fi
done
py_finish ddp_python

# Shared by the Python tests (tests/mp/ddp_python.sh, tests/mp/ddp_torch.sh); sourced,
# not run (tests/run.sh runs tests/mp/*.sh only).
#   py_setup NAME                 skip (77) in a sanitizer build or without torch; TMP, env
#   py_run NAME P PATTERN SCRIPT ARGS...   P ranks through ringlet-run; passes when the
#                                 launcher exits 0 and PATTERN matches P output lines
#   py_finish NAME                summary line and exit status
#   free_port_pair                a free port of 127.0.0.1 whose next one is free too
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
RUN="$BUILD/bin/ringlet-run"

now_ms() { echo $(($(date +%s%N) / 1000000)); }
# A free TCP port P of 127.0.0.1 whose next one is free too (torch's store takes P, ringlet's
# rank 0 P + 1 under torchrun), from the kernel's choice rather than a random guess.
free_port_pair() {
    "${PYTHON:-/usr/bin/python3}" -c '
import socket
for _ in range(100):
    a = socket.socket(); a.bind(("127.0.0.1", 0)); p = a.getsockname()[1]
    b = socket.socket()
    try:
        b.bind(("127.0.0.1", p + 1))
    except OSError:
        continue
    finally:
        b.close(); a.close()
    print(p); break'
}

py_setup() {
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
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-$1.XXXXXX")
    trap 'rm -rf "$TMP"' EXIT
    export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
    export RINGLET_LIB="$PWD/$LIB"
    export RINGLET_TIMEOUT=${RINGLET_TIMEOUT:-120}
    export OMP_NUM_THREADS=1
    fails=0
    t_all=$(now_ms)
}

py_run() {
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
        # Rank 0's detail lines (agreement figures, error messages seen).
        grep -E "^\[0\] rank 0: $name: " "$TMP/out" | grep -v PASS | sed 's/^\[0\] rank 0: /      /'
    else
        fails=$((fails + 1))
        echo "FAIL: $name P=$P: launcher exit status $rc, $good of $P ranks passed"
        grep -E "$name|FAIL|Error|error" "$TMP/out" | head -n 40
        echo "----- last lines of output and stderr:"
        tail -n 15 "$TMP/out"
        tail -n 30 "$TMP/err"
        echo "-----"
    fi
}

py_finish() {
    local dt=$(($(now_ms) - t_all))
    if [ "$fails" = 0 ]; then
        echo "$1: all passed ($((dt / 1000)) s)"
        exit 0
    fi
    echo "$1: $fails runs failed ($((dt / 1000)) s)"
    exit 1
}

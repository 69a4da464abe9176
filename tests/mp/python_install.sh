#!/usr/bin/env bash
# The Python package as users install it: `pip install ./python` (pure Python; offline
# here, hence --no-build-isolation --no-index) into a fresh virtual environment made with
# --system-site-packages (Debian's python3 refuses pip installs outside one, PEP 668; the
# system's torch and numpy stay visible), then, from a directory outside the source tree:
#   - without any way to find libringlet, `import ringlet` fails saying every place tried;
#   - with RINGLET_LIBRARY, `python -m ringlet` prints the version and the library's path,
#     and an all-reduce runs on 2 ranks through ringlet-run (numpy arrays);
#   - torchrun (python3 -m torch.distributed.run --nproc_per_node 2 --redirects 2 --tee 2,
#     where it runs) launches 2 ranks of the same script: ringlet reads torchrun's variables;
#   - after `make install PREFIX=<scratch>`, with no RINGLET_LIBRARY: the package make
#     install put in the prefix finds the prefix's library (the prefix it recorded), and
#     runs init_process_group("ringlet") on 2 ranks; the venv's package finds it through
#     pkg-config (PKG_CONFIG_PATH=<scratch>/lib/pkgconfig); found by the loader
#     (LD_LIBRARY_PATH), `python -m ringlet` names the file; an older library first on the
#     loader's path is passed over (named by RINGLET_LIBRARY: refused, saying what it lacks).
# Skips (77) without the venv module or pip, and in a sanitizer build (python3 would need
# the sanitizer runtime preloaded). Exit 0 = passed, 1 = failed.
set -u
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
source "$(dirname "$0")/lib/python.bash" # free_port_pair
if [ -n "${SANITIZE:-}" ]; then
    echo "SKIP: Python tests do not run in a sanitizer build (SANITIZE=$SANITIZE)"
    exit 77
fi
"$PYTHON" -m venv --help >/dev/null 2>&1 && "$PYTHON" -m pip --version >/dev/null 2>&1 ||
    { echo "SKIP: $PYTHON has no venv module or no pip (apt install python3-venv python3-pip)"; exit 77; }
"$PYTHON" -c "import numpy" 2>/dev/null || { echo "SKIP: numpy is not importable by $PYTHON"; exit 77; }
LIB="$PWD/$BUILD/lib/libringlet.so"
RUN="$PWD/$BUILD/bin/ringlet-run"
for f in "$LIB" "$RUN"; do [ -e "$f" ] || { echo "FAIL: $f not found (build first)"; exit 1; }; done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-pyinst.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0
"$PYTHON" -m venv --system-site-packages "$TMP/venv" >"$TMP/log" 2>&1 &&
    cp -r python "$TMP/src" && "$TMP/venv/bin/pip" install --no-build-isolation --no-index "$TMP/src" >>"$TMP/log" 2>&1 ||
    { echo "FAIL: pip install ./python"; cat "$TMP/log"; exit 1; }
echo "ok:   pip install ./python: $(grep -m1 'Successfully installed' "$TMP/log")"
PY="$TMP/venv/bin/python"
cat >"$TMP/prog.py" <<'PROG'
import os, numpy, ringlet
comm = ringlet.init_from_env()
x = numpy.arange(10, dtype=numpy.float32) * (comm.rank + 1)
ringlet.all_reduce(x)
want = numpy.arange(10, dtype=numpy.float32) * sum(r + 1 for r in range(comm.size))
ok = bool((x == want).all())
print("prog: rank %d of %d from %s: %s" % (comm.rank, comm.size, os.path.dirname(ringlet.__file__),
                                           "OK" if ok else "WRONG %s" % x), flush=True)
ringlet.destroy()
PROG
SRC=$PWD
cd "$TMP" || exit 1
# no library to be found (and no pkg-config entry of an install elsewhere on this machine):
# the error lists what was tried
out=$(env -u RINGLET_LIB -u RINGLET_LIBRARY PKG_CONFIG_LIBDIR="$TMP/none" PKG_CONFIG_PATH= "$PY" -c "import ringlet" 2>&1)
if grep -q "tried, in order" <<<"$out" && grep -q "RINGLET_LIBRARY" <<<"$out"; then
    echo "ok:   no library: $(tail -n 1 <<<"$out" | cut -c1-160)..."
else
    fails=$((fails + 1))
    echo "FAIL: import without a library did not say what it tried: $out"
fi
export RINGLET_LIBRARY="$LIB" RINGLET_TIMEOUT=60 OMP_NUM_THREADS=1
want_version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$SRC/python/pyproject.toml")
out=$("$PY" -m ringlet 2>&1)
if grep -q "^ringlet $want_version (Python package at .*/site-packages/ringlet)" <<<"$out" &&
    grep -q "^library: $(realpath "$LIB") (libringlet [0-9.]*)" <<<"$out"; then
    echo "ok:   python -m ringlet: $(tr '\n' ' ' <<<"$out")"
else
    fails=$((fails + 1))
    echo "FAIL: python -m ringlet printed: $out"
fi
"$RUN" -n 2 --timeout 120 "$PY" "$TMP/prog.py" >"$TMP/out" 2>&1
rc=$?
if [ $rc = 0 ] && [ "$(grep -c 'prog: rank .*/site-packages/ringlet: OK' "$TMP/out")" = 2 ]; then
    echo "ok:   ringlet-run -n 2: the installed package, all-reduce right on both ranks"
else
    fails=$((fails + 1))
    echo "FAIL: ringlet-run with the installed package: exit status $rc"
    cat "$TMP/out"
fi
echo 'import os; print("rank", os.environ["RANK"])' >"$TMP/hello.py"
port=$(free_port_pair)
# Debian's torch 1.13 on Python 3.11: --nproc-per-node is refused, and torchrun fails at
# start with its default --redirects 0 --tee 0 (an IntFlag change of 3.11); 2 works
if ! timeout 120 "$PY" -m torch.distributed.run --nproc_per_node 2 --redirects 2 --tee 2 --master_addr 127.0.0.1 \
    --master_port $port "$TMP/hello.py" >"$TMP/hello" 2>&1; then
    echo "note: torchrun (python3 -m torch.distributed.run) does not run even a trivial script here, so it is not" \
        "tested: $(grep -E 'Error' "$TMP/hello" | tail -n 1)"
else
    port=$(free_port_pair)
    timeout 180 "$PY" -m torch.distributed.run --nproc_per_node 2 --redirects 2 --tee 2 --master_addr 127.0.0.1 \
        --master_port $port "$TMP/prog.py" >"$TMP/out" 2>&1
    # counted by match, not by line: torchrun's tee may put both ranks' lines on one
    if [ $? = 0 ] && [ "$(grep -oE 'prog: rank [0-9]+ of 2 from [^ ]+: OK' "$TMP/out" | wc -l)" = 2 ]; then
        echo "ok:   torchrun --nproc_per_node 2: all-reduce right on both ranks"
    else
        fails=$((fails + 1))
        echo "FAIL: torchrun"
        tail -n 30 "$TMP/out"
    fi
fi
# make install into a scratch prefix; then no RINGLET_LIBRARY
unset RINGLET_LIBRARY RINGLET_LIB
PREFIX="$TMP/prefix"
make -s -C "$SRC" install BUILD="$BUILD" PREFIX="$PREFIX" PYTHON="$PYTHON" >"$TMP/install.log" 2>&1 ||
    { echo "FAIL: make install"; cat "$TMP/install.log"; exit 1; }
pydir=$(dirname "$(find "$PREFIX/lib" -name _install.py -path '*/ringlet/*' | head -n 1)")
pydir=${pydir%/ringlet}
out=$(PYTHONPATH="$pydir" PKG_CONFIG_LIBDIR="$TMP/none" PKG_CONFIG_PATH= "$PYTHON" -m ringlet 2>&1)
if [ -n "$pydir" ] && grep -q "^library: $PREFIX/lib/libringlet.so" <<<"$out" && grep -q "package at $pydir" <<<"$out"; then
    echo "ok:   make install PREFIX=...: its package finds its library by itself: $(tr '\n' ' ' <<<"$out" | cut -c1-200)"
else
    fails=$((fails + 1))
    echo "FAIL: make install PREFIX=...: the installed package (in '$pydir') did not find the prefix's library: $out"
fi
out=$(PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" "$PY" -c "import ringlet; print(ringlet.library_path)" 2>&1)
if [ "$out" = "$PREFIX/lib/libringlet.so.0" ]; then
    echo "ok:   make install PREFIX=...: the venv's package finds the library through pkg-config"
else
    fails=$((fails + 1))
    echo "FAIL: the venv's package with PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig loaded: $out"
fi
# found by the loader (LD_LIBRARY_PATH): python -m ringlet names the file it loaded (it
# printed the soname resolved against the current directory)
out=$(LD_LIBRARY_PATH="$PREFIX/lib" PKG_CONFIG_LIBDIR="$TMP/none" PKG_CONFIG_PATH= "$PY" -m ringlet 2>&1)
if grep -q "^library: $PREFIX/lib/libringlet.so" <<<"$out"; then
    echo "ok:   the library found by the loader: python -m ringlet names its file"
else
    fails=$((fails + 1))
    echo "FAIL: with LD_LIBRARY_PATH=$PREFIX/lib, python -m ringlet printed: $out"
fi
# an older build first on the loader's path (one that lacks the package's functions; here a
# stub with ringlet_strerror alone) is passed over for the next place (it broke the import:
# AttributeError); named by RINGLET_LIBRARY, the import fails saying what it lacks
mkdir -p "$TMP/old" && printf 'const char *ringlet_strerror(int r) { (void)r; return "old"; }\n' >"$TMP/old/s.c" &&
    cc -shared -fPIC -o "$TMP/old/libringlet.so.0" "$TMP/old/s.c"
out=$(LD_LIBRARY_PATH="$TMP/old" PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" "$PY" -c "import ringlet; print(ringlet.library_path)" 2>&1)
out2=$(RINGLET_LIBRARY="$TMP/old/libringlet.so.0" "$PY" -c "import ringlet" 2>&1)
if [ "$out" = "$PREFIX/lib/libringlet.so.0" ] && grep -q "ImportError: .*lacks ringlet_comm_last_error" <<<"$out2"; then
    echo "ok:   an older library first on the loader's path is passed over; named, it is refused saying what it lacks"
else
    fails=$((fails + 1))
    echo "FAIL: an older library on the loader's path: loaded $out; named by RINGLET_LIBRARY: $(tail -n 1 <<<"$out2")"
fi
PYTHONPATH="$pydir" "$PREFIX/bin/ringlet-run" -n 2 --timeout 120 "$PYTHON" "$SRC/tests/python/backend_env.py" \
    ringlet-run >"$TMP/out" 2>&1
if [ "$(grep -c 'backend_env: rank [01] of 2 (ringlet-run; .*): OK' "$TMP/out")" = 2 ]; then
    echo "ok:   the installed package: init_process_group(\"ringlet\") and an all_reduce on 2 ranks"
else
    fails=$((fails + 1))
    echo "FAIL: init_process_group(\"ringlet\") with the installed package"
    tail -n 20 "$TMP/out"
fi
[ $fails = 0 ] && { echo "python_install: all passed"; exit 0; }
echo "python_install: $fails failed"
exit 1

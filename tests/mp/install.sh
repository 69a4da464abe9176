#!/usr/bin/env bash
# make install into a scratch prefix; the README's example builds against the installed
# header and library through pkg-config and runs on 3 ranks.
set -u
BUILD=${BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s install BUILD="$BUILD" PREFIX="$tmp/prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs ringlet) || { echo "pkg-config does not know ringlet"; exit 1; }
san=""
[ -n "${SANITIZE:-}" ] && san="-fsanitize=$SANITIZE"
cc -O2 $san examples/allreduce.c $flags -Wl,-rpath,"$tmp/prefix/lib" -o "$tmp/example" || exit 1
ldd "$tmp/example" | grep -q "$tmp/prefix/lib/libringlet.so.0" || { echo "example does not use the installed library"; ldd "$tmp/example"; exit 1; }
out=$("$tmp/prefix/bin/ringlet-run" -n 3 --timeout 60 "$tmp/example" 2>&1)
echo "$out"
grep -q 'x\[0\] = 3 (expected 3)' <<<"$out"

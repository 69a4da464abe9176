#!/usr/bin/env bash
# make install into a scratch prefix (outside the loader's paths); the README's example
# builds and runs with the README's two commands as written (pkg-config's flags carry an
# rpath to the installed library; PKG_CONFIG_PATH and PATH name the prefix, nothing sets
# LD_LIBRARY_PATH), and on 3 ranks through the installed ringlet-run; a program written
# for NCCL builds against the installed ringlet-nccl/nccl.h and runs on the installed
# ringlet-nccl/libnccl.so.2 (which finds the installed libringlet). make install runs
# ldconfig after an install to /usr or /usr/local (make -n), never under DESTDIR or
# another prefix. Writes only under a temporary folder and $BUILD.
set -u
BUILD=${BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s install BUILD="$BUILD" PREFIX="$tmp/prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs ringlet) || { echo "pkg-config does not know ringlet"; exit 1; }
san=""
[ -n "${SANITIZE:-}" ] && san="-fsanitize=$SANITIZE"
unset LD_LIBRARY_PATH
# The README's commands (the two indented lines after "Build and run it"), as written, in
# a folder holding the example; a sanitized library needs a sanitized program.
readme_cmds=$(awk '/^Build and run it on/ {f = 1; next} f && /^    [^ ]/ {print substr($0, 5); if (++n == 2) exit}' README.md)
grep -q '^cc .*pkg-config --cflags --libs ringlet' <<<"$readme_cmds" && grep -q '^ringlet-run -n 4 ./example$' <<<"$readme_cmds" ||
    { echo "the README's build-and-run commands are not where this test looks:"; echo "$readme_cmds"; exit 1; }
mkdir "$tmp/user"
cp examples/allreduce.c "$tmp/user/example.c"
out=$(cd "$tmp/user" && PATH="$tmp/prefix/bin:$PATH" timeout 120 bash -ec "${readme_cmds/cc -O2/cc -O2 $san}" 2>&1)
echo "$out"
grep -q 'x\[0\] = 6 (expected 6)' <<<"$out" || { echo "the README's commands failed after make install"; exit 1; }
ldd "$tmp/user/example" | grep -q "$tmp/prefix/lib/libringlet.so.0" ||
    { echo "the example does not use the installed library"; ldd "$tmp/user/example"; exit 1; }
cc -O2 $san examples/allreduce.c $flags -o "$tmp/example" || exit 1
out=$("$tmp/prefix/bin/ringlet-run" -n 3 --timeout 60 "$tmp/example" 2>&1)
echo "$out"
grep -q 'x\[0\] = 3 (expected 3)' <<<"$out" || exit 1
# The README shows examples/allreduce.c as it is; its error pattern prints ringlet's
# message once, as ringlet wrote it (it used to print "init: %s", and every init message
# read "init: init ...").
diff <(awk '/^```c$/{f=1;next} f&&/^```$/{exit} f' README.md) <(sed -n '/^#include <ringlet.h>/,$p' examples/allreduce.c) ||
    { echo "the README's example differs from examples/allreduce.c"; exit 1; }
for bad in "RANK=2 WORLD_SIZE=2|invalid argument: init from environment: RANK=2 is out of range for WORLD_SIZE=2" \
    "RANK=0 WORLD_SIZE=1 RINGLET_CHECK=yes|invalid argument: init from environment: RINGLET_CHECK=yes: must be 0 or 1"; do
    out=$(env -u RINGLET_CHECK MASTER_ADDR=127.0.0.1 MASTER_PORT=29735 ${bad%%|*} "$tmp/example" 2>&1)
    if [ $? = 0 ] || ! grep -qF "${bad#*|}" <<<"$out" || grep -q "init: init" <<<"$out"; then
        echo "the example with ${bad%%|*} printed: $out"
        exit 1
    fi
    echo "example with ${bad%%|*}: $out"
done
cat >"$tmp/nccl_prog.c" <<'PROG'
#include <nccl.h>
#include <stdio.h>
int main(void) {
    int v = 0;
    ncclUniqueId id;
    ncclComm_t c;
    float x[4] = {1, 2, 3, 4};
    if (ncclGetVersion(&v) || ncclGetUniqueId(&id) || ncclCommInitRank(&c, 1, id, 0)) return 1;
    if (ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, c, NULL) || ncclCommDestroy(c)) return 1;
    printf("nccl program: version %d, x[3] = %g\n", v, x[3]);
    return x[3] == 4 ? 0 : 1;
}
PROG
cc -O2 $san -I"$tmp/prefix/include/ringlet-nccl" "$tmp/nccl_prog.c" -L"$tmp/prefix/lib/ringlet-nccl" -lnccl \
    -Wl,-rpath,"$tmp/prefix/lib/ringlet-nccl" -o "$tmp/nccl_prog" || exit 1
ldd "$tmp/nccl_prog" | grep -qE "libringlet.so.0 => $tmp/prefix/lib/(ringlet-nccl/\.\./)?libringlet.so.0" ||
    { echo "the installed libnccl.so.2 does not find the installed libringlet"; ldd "$tmp/nccl_prog"; exit 1; }
"$tmp/nccl_prog" || exit 1
# ldconfig: after an install to /usr or /usr/local, not when staged under DESTDIR, not for
# another prefix (whose ringlet.pc carries the rpath instead)
ldc() { make -n install BUILD="$BUILD" "$@" 2>/dev/null | grep -cx 'ldconfig'; }
[ "$(ldc PREFIX=/usr/local)" = 1 ] && [ "$(ldc PREFIX=/usr)" = 1 ] && [ "$(ldc PREFIX=/usr DESTDIR="$tmp/stage")" = 0 ] &&
    [ "$(ldc PREFIX="$tmp/prefix")" = 0 ] || { echo "make install runs ldconfig where it should not, or not where it should"; exit 1; }
grep -q -- "-Wl,-rpath,$tmp/prefix/lib" <<<"$flags" || { echo "pkg-config's flags lack the rpath: $flags"; exit 1; }
echo "ldconfig after installs to /usr and /usr/local only; ringlet.pc's rpath elsewhere: $flags"
# What the installed libringlet.so exports: the public API (ringlet_*) and the few internals
# src/api/exports.map lets ringlet's own tools and tests call; no other rl_* or sim_* name
# (a program's own, readline's rl_* say, must never meet them)
allowed=$(sed -n 's/^ *\(rl_[a-z_]*\);$/\1/p' src/api/exports.map)
extra=$(nm -D --defined-only "$tmp/prefix/lib/libringlet.so.0" | awk '{print $3}' | grep -v '^ringlet_' |
    grep -vxF "$allowed")
[ -n "$allowed" ] && [ -z "$extra" ] || { echo "libringlet.so exports internals: $(echo $extra | head -c 400)"; exit 1; }
echo "libringlet.so exports ringlet_* and $(wc -w <<<"$allowed") internals for ringlet's tools and tests, nothing else"

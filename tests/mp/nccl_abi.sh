#!/usr/bin/env bash
# ringlet's libnccl.so.2 against NCCL's own header (the CUDA toolkit's nccl.h):
#   1. tests/nccl/abi_probe.c compiled against NCCL's header and against ringlet's prints
#      the same enum values, constants, struct sizes, field offsets and initializers
#      (the version lines differ by design);
#   2. every function NCCL's header declares is exported, with its pnccl twin, and
#      nothing else is (soname libnccl.so.2);
#   3. tests/nccl/call_all.c, compiled against NCCL's header and linked to ringlet's
#      library, calls every one of them and checks the results (host memory, and again
#      with the simulated GPU so that ncclMemAlloc works);
#   4. the symbols NCCL's own libnccl.so.2 exports (nm -D, never loaded) that ringlet's
#      does not are listed; README.md ("NCCL API") says why.
# Skips (77) where NCCL's header is absent. Exit 0 = passed, 1 = failed.
set -u
BUILD=${BUILD:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
HDR="$CUDA_HOME/include/nccl.h"
LIB="$BUILD/lib/libnccl.so.2"
CC=${CC:-cc}
[ -f "$HDR" ] || { echo "SKIP: NCCL's header $HDR is not here (the CUDA toolkit ships it)"; exit 77; }
[ -f "$LIB" ] || { echo "FAIL: $LIB not found (build first, or set BUILD)"; exit 1; }
SAN=()
[ -n "${SANITIZE:-}" ] && SAN=(-fsanitize="$SANITIZE" -fno-omit-frame-pointer)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-nccl-abi.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# 1. the ABI as each header sees it
$CC -std=c11 -Wall -Wextra -I"$CUDA_HOME/include" tests/nccl/abi_probe.c -o "$TMP/probe_nccl" &&
    $CC -std=c11 -Wall -Wextra -Isrc/nccl -DRINGLET_NCCL_NO_CUDA_HEADERS tests/nccl/abi_probe.c -o "$TMP/probe_ours" ||
    { echo "FAIL: the ABI probe does not compile"; exit 1; }
"$TMP/probe_nccl" >"$TMP/nccl.txt" && "$TMP/probe_ours" >"$TMP/ours.txt" || fail "the ABI probe did not run"
if diff <(grep -v '^info' "$TMP/nccl.txt") <(grep -v '^info' "$TMP/ours.txt") >"$TMP/diff"; then
    echo "ok:   ABI: $(grep -vc '^info' "$TMP/nccl.txt") values, sizes and offsets the same under both headers"
    grep '^info' "$TMP/nccl.txt" | sed 's/^info/      NCCL header:  /'
    grep '^info' "$TMP/ours.txt" | sed 's/^info/      ringlet header:/'
else
    fail "ABI differs (< NCCL's header, > ringlet's):"
    cat "$TMP/diff"
fi

# 2. exports
grep -E '^[[:space:]]*(ncclResult_t|const char[[:space:]]*\*|void)[[:space:]]+p?nccl[A-Za-z]+[[:space:]]*\(' "$HDR" |
    grep -oE 'p?nccl[A-Za-z]+[[:space:]]*\(' | tr -d ' (' | sort -u >"$TMP/declared"
nm -D --defined-only "$LIB" | awk '$2 ~ /^[TtWi]$/ {print $3}' | sort -u >"$TMP/exported"
nm -D --defined-only "$LIB" | awk '{print $3}' | grep -vE '^p?nccl' >"$TMP/extra"
missing=$(comm -23 "$TMP/declared" "$TMP/exported")
[ -z "$missing" ] || fail "declared in NCCL's header but not exported: $missing"
[ -s "$TMP/extra" ] && fail "exported beyond nccl*/pnccl*: $(tr '\n' ' ' <"$TMP/extra")"
soname=$(readelf -d "$LIB" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libnccl.so.2 ] || fail "soname is '$soname'"
[ -z "$missing" ] && [ ! -s "$TMP/extra" ] &&
    echo "ok:   exports: the $(wc -l <"$TMP/declared") functions of NCCL's header (with their pnccl twins), nothing else; soname $soname"

# 3. every function called by a program built against NCCL's header
for f in $(grep -v '^pnccl' "$TMP/declared"); do
    grep -qE "\b$f\(" tests/nccl/call_all.c || fail "tests/nccl/call_all.c does not call $f"
done
if $CC -std=c11 -Wall -Wextra -Wno-deprecated-declarations "${SAN[@]}" -I"$CUDA_HOME/include" tests/nccl/call_all.c \
    -o "$TMP/call_all" "$LIB" -Wl,-rpath,"$(cd "$BUILD/lib" && pwd)" -ldl; then
    for dev in none sim; do
        if [ $dev = sim ]; then RINGLET_DEVICE=sim "$TMP/call_all" >"$TMP/out" 2>&1; else "$TMP/call_all" >"$TMP/out" 2>&1; fi
        rc=$?
        from=$(sed -n 's/^ncclGetVersion from //p' "$TMP/out")
        if [ $rc = 0 ] && [ "$(readlink -f "$from")" = "$(readlink -f "$LIB")" ]; then
            echo "ok:   every function, device backend $dev: $(tail -n 1 "$TMP/out") (served by $from)"
        else
            fail "call_all (device backend $dev): exit $rc, library '$from'"
            tail -n 20 "$TMP/out"
        fi
    done
else
    fail "tests/nccl/call_all.c does not compile against NCCL's header"
fi

# 4. what NCCL's own library exports and ringlet's does not (its symbol table only)
NLIB="$CUDA_HOME/lib64/libnccl.so.2"
if [ -f "$NLIB" ]; then
    nm -D --defined-only "$NLIB" | awk '{print $3}' | grep -E '^p?nccl' | sort -u >"$TMP/nccl_exports"
    notours=$(comm -23 "$TMP/nccl_exports" "$TMP/exported" | grep -v '^pnccl' | tr '\n' ' ')
    ours_only=$(comm -13 "$TMP/nccl_exports" "$TMP/exported" | tr '\n' ' ')
    echo "ok:   nm -D $NLIB: $(wc -l <"$TMP/nccl_exports") nccl/pnccl symbols; not in ringlet's: ${notours:-none}"
    [ -n "$ours_only" ] && fail "ringlet exports what NCCL's library does not: $ours_only"
else
    echo "note: $NLIB is not here: no comparison of the symbol lists"
fi
[ $fails = 0 ] && { echo "nccl_abi: all passed"; exit 0; }
echo "nccl_abi: $fails failed"
exit 1

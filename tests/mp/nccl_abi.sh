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
#      does not are listed; README.md ("NCCL API") says why;
#   5. NCCL 2.28's device API (nccl_device.h and nccl_device/*.h, where the toolkit has
#      them): every host function they declare (not the inline or device-only ones) is
#      in 2.'s list, with a pnccl twin as NCCL's library has; tests/mp/nccl_device_probe.cc,
#      C++ on NCCL's headers as PyTorch uses them, checks ringlet's prototypes against
#      NCCL's, ncclTeam_t's layout, and calls each of them on 3 ranks (without them,
#      PyTorch 2.11 fails to import: "undefined symbol: ncclDevCommDestroy").
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
    grep -oE 'p?nccl[A-Za-z]+[[:space:]]*\(' | tr -d ' (' | sort -u >"$TMP/declared_nccl_h"
# the device headers' host functions: a declaration (optionally NCCL_EXTERN_C, __host__, a
# return type) that is not inline, device-only or a template
DEVHDRS=("$CUDA_HOME/include/nccl_device.h" "$CUDA_HOME"/include/nccl_device/*.h)
: >"$TMP/declared_device"
if [ -f "$CUDA_HOME/include/nccl_device/core.h" ]; then
    grep -hE '^[[:space:]]*(NCCL_EXTERN_C[[:space:]]+)?(__host__[[:space:]]+)?[A-Za-z_][A-Za-z0-9_]*[[:space:]*]+p?nccl[A-Za-z0-9_]*[[:space:]]*\(' \
        "${DEVHDRS[@]}" | grep -vE 'INLINE|inline|__device__|template|typedef|return' |
        grep -oE '\bnccl[A-Za-z0-9_]*[[:space:]]*\(' | tr -d ' (' | sort -u >"$TMP/declared_device"
    [ -s "$TMP/declared_device" ] || fail "no host function found in $CUDA_HOME/include/nccl_device/ (the pattern is out of date?)"
else
    echo "note: $CUDA_HOME/include/nccl_device/ is not here (NCCL before 2.28): no device API to check"
fi
sed 's/^/p/' "$TMP/declared_device" | cat - "$TMP/declared_device" "$TMP/declared_nccl_h" | sort -u >"$TMP/declared"
nm -D --defined-only "$LIB" | awk '$2 ~ /^[TtWi]$/ {print $3}' | sort -u >"$TMP/exported"
nm -D --defined-only "$LIB" | awk '{print $3}' | grep -vE '^p?nccl' >"$TMP/extra"
missing=$(comm -23 "$TMP/declared" "$TMP/exported" | tr '\n' ' ')
[ -z "$missing" ] || fail "declared in NCCL's header but not exported: $missing"
[ -s "$TMP/extra" ] && fail "exported beyond nccl*/pnccl*: $(tr '\n' ' ' <"$TMP/extra")"
soname=$(readelf -d "$LIB" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libnccl.so.2 ] || fail "soname is '$soname'"
[ -z "$missing" ] && [ ! -s "$TMP/extra" ] &&
    echo "ok:   exports: the $(wc -l <"$TMP/declared") functions of NCCL's headers (with their pnccl twins; $(wc -l <"$TMP/declared_device") host functions of nccl_device among them), nothing else; soname $soname"

# A program linked to ringlet's library (label, a function it prints "FN from LIBRARY" for,
# the command): it must exit 0, and ringlet's library must have served it.
served() {
    local label=$1 fn=$2 rc from
    shift 2
    "$@" >"$TMP/out" 2>&1
    rc=$?
    from=$(sed -n "s/^$fn from //p" "$TMP/out")
    if [ $rc = 0 ] && [ "$(readlink -f "$from")" = "$(readlink -f "$LIB")" ]; then
        echo "ok:   $label: $(tail -n 1 "$TMP/out") (served by $from)"
    else
        fail "$label: exit $rc, library '$from'"
        tail -n 20 "$TMP/out"
    fi
}

# 3. every function called by a program built against NCCL's header
for f in $(grep -v '^pnccl' "$TMP/declared_nccl_h"); do
    grep -qE "\b$f\(" tests/nccl/call_all.c || fail "tests/nccl/call_all.c does not call $f"
done
if $CC -std=c11 -Wall -Wextra -Wno-deprecated-declarations "${SAN[@]}" -I"$CUDA_HOME/include" tests/nccl/call_all.c \
    -o "$TMP/call_all" "$LIB" -Wl,-rpath,"$(cd "$BUILD/lib" && pwd)" -ldl; then
    for dev in none sim; do
        served "every function, device backend $dev" ncclGetVersion env RINGLET_DEVICE=$dev "$TMP/call_all"
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
# 5. the device API's host functions from a C++ program on NCCL's headers
CXX=${CXX:-c++}
PROBE=tests/mp/nccl_device_probe.cc
if [ ! -s "$TMP/declared_device" ]; then
    echo "note: no device API in NCCL's headers: $PROBE not run"
elif ! command -v "$CXX" >/dev/null 2>&1; then
    echo "note: no C++ compiler ($CXX): $PROBE not run"
else
    for f in $(cat "$TMP/declared_device"); do
        grep -qE "\b$f\(" "$PROBE" || fail "$PROBE does not call $f"
    done
    # ringlet's prototypes, preprocessed, for the probe to declare again after NCCL's
    $CC -E -P -DRINGLET_NCCL_NO_CUDA_HEADERS -Isrc/nccl -x c src/nccl/nccl.h | tr '\n' ' ' |
        grep -oE '(const[[:space:]]+)?[A-Za-z_][A-Za-z0-9_]*[[:space:]*]+p?nccl[A-Za-z0-9]+[[:space:]]*\([^)]*\)[[:space:]]*;' \
            >"$TMP/ringlet_decls.h"
    if $CXX -std=c++17 -Wall -Wextra "${SAN[@]}" -I"$CUDA_HOME/include" -DRINGLET_DECLS="\"$TMP/ringlet_decls.h\"" \
        "$PROBE" -o "$TMP/device_probe" "$LIB" -Wl,-rpath,"$(cd "$BUILD/lib" && pwd)" -ldl >"$TMP/build.log" 2>&1 &&
        $CXX -std=c++17 -Wall -Wextra -DRINGLET_HEADER -DRINGLET_NCCL_NO_CUDA_HEADERS -Isrc/nccl "$PROBE" \
            -o "$TMP/layout_ours" >>"$TMP/build.log" 2>&1; then
        [ -s "$TMP/build.log" ] && { fail "warnings building $PROBE:"; cat "$TMP/build.log"; }
        echo "ok:   the $(grep -c . "$TMP/ringlet_decls.h") prototypes of ringlet's nccl.h agree with NCCL's headers (a C++ program declares both)"
        served "device API, host side, 3 ranks" ncclTeamWorld "$TMP/device_probe"
        theirs=$(grep '^layout' "$TMP/out") ours=$("$TMP/layout_ours")
        if [ -n "$theirs" ] && [ "$theirs" = "$ours" ]; then
            echo "ok:   ${theirs#layout } under both headers"
        else
            fail "ncclTeam_t differs: NCCL's header '$theirs', ringlet's '$ours'"
        fi
    else
        fail "$PROBE does not build against NCCL's headers and ringlet's library:"
        grep -m 15 -E 'error|undefined' "$TMP/build.log"
    fi
fi

[ $fails = 0 ] && { echo "nccl_abi: all passed"; exit 0; }
echo "nccl_abi: $fails failed"
exit 1

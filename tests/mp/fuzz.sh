#!/usr/bin/env bash
# Fuzzing of every parser of bytes from outside (libFuzzer, clang's
# -fsanitize=fuzzer,address,undefined): the unique id, the bootstrap handshake's
# messages, the TCP part header / hello / blob, the shared-memory segment and slot
# headers, the IB connection exchange and chunk header, and the environment parsers
# (sizes such as 256K, RINGLET_SOCKET_IFNAME, RINGLET_IB_HCA). Targets: tests/fuzz/*.c
# (one LLVMFuzzerTestOneInput each, calling the library's own check functions).
#
#   1. builds the library with clang into $BUILD/fuzz/lib (the Makefile's rules, CUDA=0,
#      instrumented: fuzzer-no-link,address,undefined), then each target into
#      $BUILD/fuzz/<target>, and $BUILD/fuzz/gen_corpus (writes the seeds);
#   2. replays every input under tests/fuzz/regress/<target>/ (past findings);
#   3. fuzzes each target for FUZZ_SECONDS (default 10) on a copy of its seeds
#      (tests/fuzz/corpus/<target>/), one at a time, and prints its executions.
# Any crash, sanitizer report, leak, timeout or violated property fails the test, with
# the target and the reproducer (kept under $BUILD/fuzz/work/<target>/). To replay one:
#   $BUILD/fuzz/<target> FILE
# FUZZ_TARGETS="tcp shm" picks targets. Skips (77) under SANITIZE (the fuzzers carry
# their own sanitizers) and where clang or libFuzzer is missing.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
SECS=${FUZZ_SECONDS:-10}
CLANG=${CLANG:-clang}
OUT=$BUILD/fuzz
if [ -n "${SANITIZE:-}" ]; then
    echo "SKIP: the fuzzers carry their own sanitizers (address,undefined); they run in the normal build"
    exit 77
fi
command -v "$CLANG" >/dev/null || { echo "SKIP: $CLANG not found (Debian: apt install clang libclang-rt-dev)"; exit 77; }
mkdir -p "$OUT"
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; return (int)(n & 0); }\n' \
    >"$OUT/probe.c"
"$CLANG" -fsanitize=fuzzer,address,undefined "$OUT/probe.c" -o "$OUT/probe" >"$OUT/probe.log" 2>&1 ||
    { echo "SKIP: $CLANG cannot link libFuzzer ($(head -c 200 "$OUT/probe.log")); Debian: apt install libclang-rt-dev"; exit 77; }

INC=(-Iinclude -Isrc/base -Isrc/device -Isrc/comm -Isrc/algo -Isrc/engine -Isrc/api -Itransports -Ikernels -D_GNU_SOURCE)
CFL=(-std=c11 -g -O1 -Wall -Wextra -fno-omit-frame-pointer -fno-sanitize-recover=all)
LIBS=(-pthread -ldl -lm -lrt)
LIB=$OUT/lib/lib/libringlet.a

# 1. build: the library (incremental: make knows what changed), the targets, the seed writer
make -s -j2 CC="$CLANG" CUDA=0 SANITIZE=fuzzer-no-link,address,undefined OPT=-O1 BUILD="$OUT/lib" "$LIB" \
    >"$OUT/build.log" 2>&1 || { echo "FAIL: the instrumented library does not build:"; tail -n 30 "$OUT/build.log"; exit 1; }
targets=()
for src in tests/fuzz/*.c; do
    t=$(basename "$src" .c)
    [ "$t" = gen_corpus ] && continue
    if [ -n "${FUZZ_TARGETS:-}" ] && ! grep -qw -- "$t" <<<"$FUZZ_TARGETS"; then continue; fi
    targets+=("$t")
done
[ ${#targets[@]} -gt 0 ] || { echo "FAIL: no fuzz target under tests/fuzz/ (FUZZ_TARGETS=${FUZZ_TARGETS:-})"; exit 1; }
stale() { # output inputs...: 0 when output is missing or older than an input
    local o=$1; shift
    [ -e "$o" ] || return 0
    for i in "$@"; do [ "$i" -nt "$o" ] && return 0; done
    return 1
}
for t in "${targets[@]}" gen_corpus; do
    san=fuzzer
    [ "$t" = gen_corpus ] && san=fuzzer-no-link # its own main
    if stale "$OUT/$t" "tests/fuzz/$t.c" tests/fuzz/fuzz.h "$LIB"; then
        "$CLANG" "${CFL[@]}" -fsanitize="$san",address,undefined "${INC[@]}" "tests/fuzz/$t.c" "$LIB" "${LIBS[@]}" \
            -o "$OUT/$t" >"$OUT/$t.build.log" 2>&1 || { echo "FAIL: $t does not build:"; cat "$OUT/$t.build.log"; exit 1; }
    fi
done
echo "ok:   built ${targets[*]} with $("$CLANG" --version | head -n 1)"

fails=0
show_reproducer() { # file
    echo "      reproducer: $1 ($(stat -c %s "$1") bytes); replay: $OUT/$t $1"
    od -A x -t x1z -v "$1" | head -n 16 | sed 's/^/      /'
}

# 2. past findings, replayed
for t in "${targets[@]}"; do
    d=tests/fuzz/regress/$t
    files=()
    [ -d "$d" ] && while IFS= read -r f; do files+=("$f"); done < <(find "$d" -type f | sort)
    [ ${#files[@]} -gt 0 ] || continue
    if "$OUT/$t" -error_exitcode=1 -timeout=10 "${files[@]}" >"$OUT/$t.regress.log" 2>&1; then
        echo "ok:   $t: ${#files[@]} regression input(s) replayed"
    else
        echo "FAIL: $t: a regression input fails again:"
        grep -E "ERROR|runtime error|property violated|Running:" "$OUT/$t.regress.log" | tail -n 8 | sed 's/^/      /'
        fails=$((fails + 1))
    fi
done

# 3. fuzzing, one target at a time
for t in "${targets[@]}"; do
    w=$OUT/work/$t
    rm -rf "$w"
    mkdir -p "$w/corpus" "$w/artifacts"
    [ -d "tests/fuzz/corpus/$t" ] && cp tests/fuzz/corpus/"$t"/* "$w/corpus/" 2>/dev/null
    seeds=$(find "$w/corpus" -type f | wc -l)
    "$OUT/$t" -max_total_time="$SECS" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
        -error_exitcode=1 -timeout_exitcode=1 -artifact_prefix="$w/artifacts/" "$w/corpus" >"$w/log" 2>&1
    rc=$?
    execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$w/log")
    found=$(find "$w/artifacts" -type f | sort)
    if [ $rc -ne 0 ] || [ -n "$found" ]; then
        echo "FAIL: $t (exit $rc, ${execs:-?} executions):"
        grep -E "ERROR|runtime error|property violated|SUMMARY|Test unit written" "$w/log" | head -n 12 | sed 's/^/      /'
        for f in $found; do show_reproducer "$f"; done
        echo "      add the reproducer under tests/fuzz/regress/$t/ once fixed; log: $w/log"
        fails=$((fails + 1))
    else
        echo "ok:   $t: ${execs:-?} executions in ${SECS} s, corpus $seeds -> $(find "$w/corpus" -type f | wc -l) inputs"
    fi
done
[ $fails -eq 0 ] || { echo "FAIL: $fails fuzz target(s) failed"; exit 1; }
echo "PASS: ${#targets[@]} fuzz targets"

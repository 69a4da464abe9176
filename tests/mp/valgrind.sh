#!/usr/bin/env bash
# valgrind memcheck on 3-rank runs through ringlet-run (every rank under valgrind):
# every collective on host memory over shared memory and over TCP, and on simulated
# device memory (RINGLET_DEVICE=sim); small counts (--quick, --max-count 1000). Fails on
# any memcheck error (invalid access, uninitialised value used, a definite or indirect
# leak) or a wrong result. Normal build only: valgrind cannot run a sanitized binary.
# Exit 0 = passed, 77 = skipped, 1 = failed.
set -u
BUILD=${BUILD:-build}
RUN="$BUILD/bin/ringlet-run"
PROG="$BUILD/tests/mp/collectives"
if [ -n "${SANITIZE:-}" ]; then
    echo "SKIP: valgrind does not run sanitized binaries (SANITIZE=$SANITIZE); the normal build runs it"
    exit 77
fi
command -v valgrind >/dev/null 2>&1 || { echo "SKIP: valgrind is not installed (scripts/install-deps.sh installs it)"; exit 77; }
for f in "$RUN" "$PROG"; do [ -x "$f" ] || { echo "FAIL: $f not found (build first)"; exit 1; }; done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-valgrind.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export RINGLET_TIMEOUT=120
VG=(valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect)
fails=0
one() { # label env... -- args...
    local label=$1
    shift
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" "$RUN" -n 3 --timeout 900 "${VG[@]}" "$PROG" --quick --max-count 1000 "$@" >"$TMP/out" 2>&1
    local rc=$? clean ok
    clean=$(grep -c 'ERROR SUMMARY: 0 errors' "$TMP/out")
    ok=$(grep -cE 'collectives: rank [0-9] of 3: [1-9][0-9]* cases checked, 0 failed' "$TMP/out")
    if [ $rc = 0 ] && [ "$clean" = 3 ] && [ "$ok" = 3 ]; then
        echo "ok:   $label: $(grep -m1 -oE '[0-9]+ cases checked' "$TMP/out"), 0 memcheck errors on every rank"
    else
        fails=$((fails + 1))
        echo "FAIL: $label (exit $rc, $clean of 3 ranks memcheck-clean, $ok of 3 correct)"
        grep -E '==[0-9]+== (Invalid|Conditional|Use of|Syscall|[0-9,]+ bytes in)|ERROR SUMMARY|FAIL' "$TMP/out" | head -n 40
    fi
}
one "host memory, shared memory" RINGLET_TRANSPORT=shm --
one "host memory, tcp" RINGLET_TRANSPORT=tcp --
one "simulated device memory (default transports: cuda_ipc)" RINGLET_DEVICE=sim -- --memory device \
    --colls allreduce,broadcast,reduce,allgather,reduce_scatter
[ $fails = 0 ] && { echo "valgrind: all passed"; exit 0; }
echo "valgrind: $fails failed"
exit 1

#!/usr/bin/env bash
# Shared-memory segments (/dev/shm/ringlet-*) of a live job survive another job's cleanup
# of stale segments even when the two run in different PID namespaces that share /dev/shm
# (a pid in a segment's name says nothing there); a killed job's segments are removed.
#   1. job A (2 ranks, this PID namespace) initialises and waits (its ranks have not
#      connected yet, so they still have to open each other's segments);
#   2. job B (2 ranks) runs in a new PID namespace (unshare --pid --fork): its init
#      removes stale segments;
#   3. job A goes on: its all-reduce over shared memory must succeed, exact.
#   4. job C initialises and is killed (SIGKILL) while it waits; job D's init removes
#      C's segments (their locks died with C).
#   5. the same with shared memory off (RINGLET_SHM_DISABLE=1): the doorbells job E leaves
#      are removed by job F's init.
# Needs root (unshare); skips (77) otherwise. Exit 0 = passed, 1 = failed.
set -u
BUILD=${BUILD:-build}
RUN="$BUILD/bin/ringlet-run"
PROG="$BUILD/tests/mp/shm_probe"
for f in "$RUN" "$PROG"; do [ -x "$f" ] || { echo "FAIL: $f not found (build first)"; exit 1; }; done
if [ "$(id -u)" != 0 ] || ! unshare --pid --fork true 2>/dev/null; then
    echo "SKIP: needs root for a new PID namespace (unshare --pid --fork)"
    exit 77
fi
export RINGLET_TRANSPORT=shm RINGLET_TIMEOUT=60
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-stale.XXXXXX")
trap 'kill $apid $cpid 2>/dev/null; rm -rf "$TMP"' EXIT
apid= cpid=
fails=0
wait_ready() { # dir
    for _ in $(seq 1 12000); do
        [ -e "$1/ready.0" ] && [ -e "$1/ready.1" ] && return 0
        sleep 0.01
    done
    return 1
}
segs_of() { # pids...: the job's segments
    local p n=0
    for p in "$@"; do n=$((n + $(ls /dev/shm 2>/dev/null | grep -c "^ringlet-$p-"))); done
    echo $n
}
mkdir "$TMP/a" "$TMP/c"
"$RUN" -n 2 --timeout 200 "$PROG" --hold "$TMP/a" >"$TMP/a.out" 2>&1 &
apid=$!
wait_ready "$TMP/a" || { echo "FAIL: job A did not get ready"; cat "$TMP/a.out"; exit 1; }
apids=$(pgrep -P $apid | tr '\n' ' ')
before=$(segs_of $apids)
unshare --pid --fork "$RUN" -n 2 --timeout 100 "$PROG" >"$TMP/b.out" 2>&1
brc=$?
after=$(segs_of $apids)
touch "$TMP/a/go"
wait $apid
arc=$?
apid=
if [ $brc = 0 ] && [ $arc = 0 ] && [ "$(grep -c 'shm_probe: rank .: OK' "$TMP/a.out")" = 2 ] && [ "$after" = "$before" ]; then
    echo "ok:   job A's $before segments survived job B's cleanup in another PID namespace; A's all-reduce right"
else
    fails=$((fails + 1))
    echo "FAIL: job A (exit $arc) with job B in another PID namespace (exit $brc): A's segments $before before, $after after"
    cat "$TMP/a.out" "$TMP/b.out"
fi
"$RUN" -n 2 --timeout 200 "$PROG" --hold "$TMP/c" >"$TMP/c.out" 2>&1 &
cpid=$!
wait_ready "$TMP/c" || { echo "FAIL: job C did not get ready"; cat "$TMP/c.out"; exit 1; }
cpids=$(pgrep -P $cpid | tr '\n' ' ')
cbefore=$(segs_of $cpids)
kill -9 $cpids
wait $cpid 2>/dev/null
cpid=
"$RUN" -n 2 --timeout 100 "$PROG" >"$TMP/d.out" 2>&1
drc=$?
cafter=$(segs_of $cpids)
if [ $drc = 0 ] && [ "$cbefore" -gt 0 ] && [ "$cafter" = 0 ]; then
    echo "ok:   killed job C's $cbefore segments removed by job D's init"
else
    fails=$((fails + 1))
    echo "FAIL: killed job C's segments: $cbefore before job D, $cafter after (job D exit $drc)"
    cat "$TMP/d.out"
fi
# 5. The same with shared memory off (RINGLET_SHM_DISABLE=1, over TCP): job E leaves only
#    its doorbells behind, and job F's init removes them (the sweep ran only in the shared
#    memory transport's init, so a site without it never had them removed).
mkdir "$TMP/e"
RINGLET_SHM_DISABLE=1 RINGLET_TRANSPORT=tcp "$RUN" -n 2 --timeout 200 "$PROG" --hold "$TMP/e" >"$TMP/e.out" 2>&1 &
cpid=$!
wait_ready "$TMP/e" || { echo "FAIL: job E did not get ready"; cat "$TMP/e.out"; exit 1; }
cpids=$(pgrep -P $cpid | tr '\n' ' ')
ebefore=$(segs_of $cpids)
kill -9 $cpids
wait $cpid 2>/dev/null
cpid=
RINGLET_SHM_DISABLE=1 RINGLET_TRANSPORT=tcp "$RUN" -n 2 --timeout 100 "$PROG" >"$TMP/f.out" 2>&1
frc=$?
eafter=$(segs_of $cpids)
if [ $frc = 0 ] && [ "$ebefore" -gt 0 ] && [ "$eafter" = 0 ]; then
    echo "ok:   shared memory off: killed job E's $ebefore segments (doorbells) removed by job F's init"
else
    fails=$((fails + 1))
    echo "FAIL: shared memory off: killed job E's segments: $ebefore before job F, $eafter after (job F exit $frc)"
    cat "$TMP/f.out"
fi
[ $fails = 0 ] && { echo "shm_stale: all passed"; exit 0; }
echo "shm_stale: $fails failed"
exit 1

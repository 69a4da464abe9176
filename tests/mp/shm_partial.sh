#!/usr/bin/env bash
# One host, 4 ranks, and one of them without shared memory (RINGLET_SHM_DISABLE=1 on rank 1
# alone, as a full /dev/shm would leave it): its pairs go over TCP, the others' over shared
# memory. Every rank must still cut a call into the same chunks (they are counted on both
# ends of a step): tests/mp/collectives --quick, every collective, counts up to 300007 (a
# step then spans chunks of a size that depends on the choice), all right on every rank.
# Rank 3's two neighbours both have shared memory: judged from its own neighbours alone, it
# chose other chunks than the rest and a receive failed ("the peer sent a message of
# 150003 bytes, this rank expected 65536").
# Then the same with RINGLET_TRANSPORT=shm forced: rank 1 cannot start it, and its init
# fails; the others' inits must fail too, at once, naming rank 1 and quoting its reason
# (they waited for it until RINGLET_TIMEOUT and said only "rank 1 never joined").
# Exit 0 = passed, 1 = failed.
set -u
BUILD=${BUILD:-build}
RUN="$BUILD/bin/ringlet-run"
PROG="$BUILD/tests/mp/collectives"
for f in "$RUN" "$PROG"; do [ -x "$f" ] || { echo "FAIL: $f not found (build first)"; exit 1; }; done
COUNT=300007
case "${SANITIZE:-}" in *thread*) COUNT=100003 ;; esac
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-shm-partial.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
unset RINGLET_TRANSPORT RINGLET_CHUNK_SIZE
RINGLET_TIMEOUT=60 "$RUN" -n 4 --timeout 300 --grace 30 -- \
    sh -c 'if [ "$RANK" = 1 ]; then export RINGLET_SHM_DISABLE=1; fi; exec "$0" "$@"' \
    "$PROG" --quick --max-count "$COUNT" >"$TMP/out" 2>&1
rc=$?
n=$(grep -cE "collectives: rank [0-9]+ of 4: [1-9][0-9]* cases checked, 0 failed" "$TMP/out")
fails=0
if [ $rc = 0 ] && [ "$n" = 4 ]; then
    echo "ok:   4 ranks, rank 1 without shared memory: $(grep -m1 -oE '[0-9]+ cases checked' "$TMP/out") per rank"
else
    fails=1
    echo "FAIL: 4 ranks, rank 1 without shared memory: launcher exit status $rc, $n of 4 ranks passed"
    grep -E "FAIL" "$TMP/out" | head -n 10
    tail -n 5 "$TMP/out"
fi
# The others get 60 s of grace (the launcher would stop them when rank 1 exits) and a
# deadline of 20 s: named in time or not, the messages are what is checked.
RINGLET_TRANSPORT=shm RINGLET_TIMEOUT=20 "$RUN" -n 4 --timeout 300 --grace 60 -- \
    sh -c 'if [ "$RANK" = 1 ]; then export RINGLET_SHM_DISABLE=1; fi; exec "$0" "$@"' \
    "$PROG" --quick --max-count 16 >"$TMP/forced" 2>&1
n=$(grep -E "^\[[023]\] FAIL: ringlet_comm_init_env returned 6 \(remote error" "$TMP/forced" |
    grep -c 'rank 1 failed (.*disabled by RINGLET_SHM_DISABLE')
if [ "$n" = 3 ] && grep -q "^\[1\] FAIL: .*disabled by RINGLET_SHM_DISABLE" "$TMP/forced"; then
    echo "ok:   RINGLET_TRANSPORT=shm, rank 1 cannot start it: the 3 others' inits fail naming rank 1, quoting it"
else
    fails=1
    echo "FAIL: RINGLET_TRANSPORT=shm, rank 1 cannot start it: $n of 3 others named rank 1 with its reason"
    grep -E "FAIL" "$TMP/forced" | head -n 6
fi
[ $fails = 0 ] && echo "shm_partial: all passed"
exit $fails

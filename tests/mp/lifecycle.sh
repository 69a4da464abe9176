#!/usr/bin/env bash
# Communicators come and go without leaking; abort works from another thread
# (tests/mp/lifecycle.c), through ringlet-run at 2 ranks:
#   - LIFECYCLE_CYCLES init/destroy and LIFECYCLE_ABORTS init/abort/destroy cycles in one
#     process per rank (default 1000 and 200; 50 and 20 in sanitizer builds), each with an
#     all-reduce: descriptors, threads, /dev/shm segments and mappings unchanged, RSS
#     within 16 MiB; again on simulated device memory (as many cycles); again over TCP with
#     reduction threads (RINGLET_REDUCE_THREADS=3, an all-reduce of 1 MiB that splits; a fifth
#     as many cycles): the two workers must run in every cycle and be gone after it;
#   - abort from a second thread while the first blocks in an all-reduce the peer never
#     joins: both return (times printed); again with the blocked thread destroying the
#     communicator as soon as its call returned (the destroy waits for the abort's teardown);
#   - a watchdog's abort and destroy at once, while one thread waits on a request, one
#     finalizes and one runs an all-reduce (shm 10 rounds, tcp 3): the calls fail, the
#     destroy waits for them to leave; a group's communicator destroyed while the group
#     still waits on another (the destroy does not wait for that);
#   - a receive the peer never sends, polled with ringlet_test only: it fails with a timeout
#   - an all-reduce the peer never joins, with RINGLET_TIMEOUT=5: it fails with a timeout
#     naming the peer, at 8 bytes (through the shared-memory board) and at 64 KiB (messages);
#   - a watchdog's abort while rank 0's destroy waits for rank 1 to leave: it ends the wait;
#   - at 3 ranks, rank 2 (then rank 0) destroys the communicator: the others' all-reduce
#     fails at once, naming it; rank 0 (then rank 1) calls last, after the third rank
#     failed and destroyed it too, and still names rank 2 (the third left, it did not die);
#   - at 3 ranks, a split whose rank 2 exits after the split's exchanges: the others'
#     split fails at once, naming rank 2;
#   - at 3 ranks, rank 1 aborts and leaves: the others' all-reduce fails at once, naming
#     rank 1 and quoting its reason (rank 2 through rank 0);
#   - inits stopped from another thread through a stop token (rank 0 waiting for a rank
#     that never joins, rank 1 in a handshake rank 0 never answers, a token fired early).
# Exit 0 = passed, 1 = failed.
set -u
BUILD=${BUILD:-build}
RUN="$BUILD/bin/ringlet-run"
PROG="$BUILD/tests/mp/lifecycle"
for f in "$RUN" "$PROG"; do [ -x "$f" ] || { echo "FAIL: $f not found (build first)"; exit 1; }; done
N=${LIFECYCLE_CYCLES:-1000} M=${LIFECYCLE_ABORTS:-200}
[ -n "${SANITIZE:-}" ] && N=${LIFECYCLE_CYCLES:-50} M=${LIFECYCLE_ABORTS:-20} && export LIFECYCLE_SANITIZED=1
export RINGLET_TIMEOUT=60
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-lifecycle.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0
one() { # label env... -- args...
    local label=$1
    shift
    rm -rf "$TMP/hs" && mkdir "$TMP/hs"
    env LIFECYCLE_DIR="$TMP/hs" "$@" >"$TMP/out" 2>&1
    local rc=$?
    if [ $rc = 0 ] && [ "$(grep -c 'lifecycle: rank .: OK' "$TMP/out")" = "${WANT_OK:-2}" ]; then
        echo "ok:   $label"
        grep -E 'lifecycle: rank (0|2): OK' "$TMP/out" | sed 's/^\[[0-9]\] /      /'
    else
        fails=$((fails + 1))
        echo "FAIL: $label (exit $rc)"
        tail -n 30 "$TMP/out"
    fi
}
one "host memory: $N init/destroy, $M init/abort cycles" "$RUN" -n 2 --timeout 900 "$PROG" --cycles "$N" --aborts "$M"
one "simulated device memory: $N init/destroy, $M init/abort cycles" RINGLET_DEVICE=sim \
    "$RUN" -n 2 --timeout 900 "$PROG" --cycles "$N" --aborts "$M" --memory device
one "reduction threads over tcp: $((N / 5)) init/destroy, $((M / 5)) init/abort cycles" RINGLET_TRANSPORT=tcp \
    RINGLET_REDUCE_THREADS=3 "$RUN" -n 2 --timeout 900 "$PROG" --cycles $((N / 5)) --aborts $((M / 5)) --count 262144 \
    --reduce-workers 2
one "abort from another thread" "$RUN" -n 2 --timeout 120 "$PROG" --abort-thread
one "abort from another thread, the blocked thread destroying at once" "$RUN" -n 2 --timeout 120 "$PROG" \
    --abort-thread --destroy-after
# a watchdog's abort and destroy while other threads are inside calls (Python's and torch's
# abort): the destroy waits for them to leave (sanitizer builds: nothing freed under them)
one "abort and destroy at once while threads wait, shm" RINGLET_TRANSPORT=shm "$RUN" -n 2 --timeout 120 "$PROG" \
    --abort-destroy 10
one "abort and destroy at once while threads wait, tcp" RINGLET_TRANSPORT=tcp "$RUN" -n 2 --timeout 120 "$PROG" \
    --abort-destroy 3
WANT_OK=3 one "abort from another thread, a receive waiting for its sender to connect" RINGLET_TRANSPORT=tcp \
    "$RUN" -n 3 --timeout 120 "$PROG" --abort-thread
# a group on two communicators: destroying the one it is done with does not wait for the
# other's wait (its deadline)
one "a group's communicator destroyed while the group waits on another" RINGLET_TIMEOUT=60 "$RUN" -n 2 --timeout 120 \
    "$PROG" --group-destroy
# a split whose member exits after the exchanges: the others' split ends when the world's
# monitor hears of it, not at the new communicator's init deadline
WANT_OK=3 one "a split whose member left after its exchanges" RINGLET_TIMEOUT=60 "$RUN" -n 3 --timeout 120 "$PROG" \
    --split-death
# a watchdog's abort while rank 0's destroy waits for rank 1 to leave first: it ends the wait
one "an abort during rank 0's destroy" RINGLET_TIMEOUT=60 "$RUN" -n 2 --timeout 120 "$PROG" --abort-destroying
# a rank that destroys the communicator: the others' next all-reduce fails at once, naming it
WANT_OK=3 one "a rank that destroyed the communicator (rank 2): the others' all-reduce fails at once" \
    RINGLET_TIMEOUT=60 "$RUN" -n 3 --timeout 120 "$PROG" --left 2 --last 0
WANT_OK=3 one "rank 2 destroyed the communicator, rank 0 failed and destroyed it: rank 1's all-reduce names rank 2" \
    RINGLET_TIMEOUT=60 "$RUN" -n 3 --timeout 120 "$PROG" --left 2 --last 1
WANT_OK=3 one "rank 2 destroyed the communicator, rank 1 failed and aborted it: rank 0's all-reduce names rank 2" \
    RINGLET_TIMEOUT=60 "$RUN" -n 3 --timeout 120 "$PROG" --left 2 --last 0 --abort
WANT_OK=4 one "rank 3 destroyed the communicator, then rank 1: a group of two all-reduces names rank 3" \
    RINGLET_TIMEOUT=60 "$RUN" -n 4 --timeout 120 "$PROG" --left 3 --other 1 --group
WANT_OK=3 one "rank 0 destroyed the communicator: the others' all-reduce fails at once" \
    RINGLET_TIMEOUT=60 "$RUN" -n 3 --timeout 120 "$PROG" --left 0
# a peer that never joins: 8 bytes through the board (shared memory), 64 KiB in messages
one "a peer that never joins, 8 bytes" RINGLET_TIMEOUT=5 "$RUN" -n 2 --timeout 120 "$PROG" --late-peer --count 2
one "a peer that never joins, 64 KiB" RINGLET_TIMEOUT=5 "$RUN" -n 2 --timeout 120 "$PROG" --late-peer --count 16384
one "a receive the peer never sends, polled with ringlet_test" RINGLET_TIMEOUT=5 "$RUN" -n 2 --timeout 120 "$PROG" \
    --late-peer-test
# a child forked after init: its calls fail at once, saying so; the parent's communicator works
one "a child forked after init" "$RUN" -n 2 --timeout 120 "$PROG" --fork
# a rank killed while a child it forked lives on: the others hear at once that it exited
rm -rf "$TMP/hs" && mkdir "$TMP/hs"
LIFECYCLE_DIR="$TMP/hs" RINGLET_TRANSPORT=shm RINGLET_TIMEOUT=60 "$RUN" -n 2 --timeout 120 --grace 50 "$PROG" \
    --fork-kill >"$TMP/out" 2>&1
[ -s "$TMP/hs/child" ] && kill "$(cat "$TMP/hs/child")" 2>/dev/null
if grep -q 'lifecycle: rank 0: OK' "$TMP/out"; then
    echo "ok:   a rank killed while its forked child lives on"
    grep -E 'lifecycle: rank 0: OK' "$TMP/out" | sed 's/^\[[0-9]\] /      /'
else
    fails=$((fails + 1))
    echo "FAIL: a rank killed while its forked child lives on"
    tail -n 30 "$TMP/out"
fi
# a rank that aborts: the others' error quotes what it said (rank 2 hears it through rank 0)
WANT_OK=3 one "a peer that aborted says why" "$RUN" -n 3 --timeout 120 "$PROG" --peer-why
# a rank that has not called the collective the others time out in: their error says so
WANT_OK=4 one "a call's timeout names the rank that has not called it" "$RUN" -n 4 --timeout 120 "$PROG" --laggard
if RINGLET_TIMEOUT=60 "$PROG" --abort-init >"$TMP/out" 2>&1 && [ "$(grep -c 'lifecycle: rank 0: OK' "$TMP/out")" = 4 ]; then
    echo "ok:   inits stopped through a stop token"
    sed 's/^/      /' "$TMP/out" | grep OK
else
    fails=$((fails + 1))
    echo "FAIL: inits stopped through a stop token"
    tail -n 30 "$TMP/out"
fi
# the same with a deadline of 35 days: rank 0's wait for the hellos must still hear the token
if RINGLET_TIMEOUT=3000000 timeout 60 "$PROG" --abort-init >"$TMP/out" 2>&1 &&
    [ "$(grep -c 'lifecycle: rank 0: OK' "$TMP/out")" = 4 ]; then
    echo "ok:   inits stopped through a stop token, RINGLET_TIMEOUT=3000000"
else
    fails=$((fails + 1))
    echo "FAIL: inits stopped through a stop token, RINGLET_TIMEOUT=3000000"
    tail -n 30 "$TMP/out"
fi
[ $fails = 0 ] && { echo "lifecycle: all passed"; exit 0; }
echo "lifecycle: $fails failed"
exit 1

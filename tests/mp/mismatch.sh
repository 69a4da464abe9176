#!/usr/bin/env bash
# Mismatched collectives with RINGLET_CHECK=1 (tests/mp/mismatch.c) at P = 2, 3 and 4 over
# shm and tcp: every rank's call fails naming both calls, the communicator stays usable;
# with the README's error pattern, which aborts on an error (mismatch --abort-on-error:
# 20 rounds, 8 under the sanitizers, at P = 3 and 4 over shm and tcp; the rank that passed
# the other count aborts the moment its call returns), every other rank still reports the
# mismatch, never "rank N failed"; and RINGLET_CHECK set differently on the ranks fails
# init on every rank, saying so, as does RINGLET_TRANSPORT set on one rank only. Without
# RINGLET_CHECK, over shared memory: a count, kind or
# root that differs in a call small enough for the board fails on every rank (P = 2, 3);
# without the board, calls in another order whose messages have the same lengths fail
# naming both calls, never return another call's data (P = 2, shm and tcp; device
# buffers over cuda_ipc).
# Exit 0 = passed, 1 = failed.
set -u
BUILD=${BUILD:-build}
RUN="$BUILD/bin/ringlet-run"
PROG="$BUILD/tests/mp/mismatch"
for f in "$RUN" "$PROG"; do [ -x "$f" ] || { echo "FAIL: $f not found (build first)"; exit 1; }; done
export RINGLET_TIMEOUT=60
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-mismatch.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0
for tr in shm tcp; do
    for P in 2 3 4; do
        RINGLET_CHECK=1 RINGLET_TRANSPORT=$tr "$RUN" -n $P --timeout 300 "$PROG" >"$TMP/out" 2>&1
        rc=$?
        if [ $rc = 0 ] && [ "$(grep -cE 'mismatch: rank [0-9]+: [1-9][0-9]* checks, 0 failed' "$TMP/out")" = $P ]; then
            echo "ok:   $tr P=$P: 9 mismatches (two in groups), each an error on every rank; the communicator went on"
        else
            fails=$((fails + 1))
            echo "FAIL: $tr P=$P (exit $rc)"
            tail -n 30 "$TMP/out"
        fi
    done
done
grep -E '^\[0\] mismatch: .* -> ' "$TMP/out" | sed 's/^\[0\] /      /'
ROUNDS=20
[ -n "${SANITIZE:-}" ] && ROUNDS=8
for tr in shm tcp; do
    for P in 3 4; do
        RINGLET_CHECK=1 RINGLET_TRANSPORT=$tr "$RUN" -n $P --timeout 300 --grace 30 "$PROG" --abort-on-error $ROUNDS \
            >"$TMP/out" 2>&1
        rc=$?
        if [ $rc = 0 ] && [ "$(grep -cE "mismatch abort: rank [0-9]+: $ROUNDS rounds, 0 wrong" "$TMP/out")" = $P ]; then
            echo "ok:   abort on error, $tr P=$P: $ROUNDS rounds, the mismatch on every rank that looked"
        else
            fails=$((fails + 1))
            echo "FAIL: abort on error, $tr P=$P (exit $rc)"
            grep -E 'FAIL|ringlet-run' "$TMP/out" | head -n 20
        fi
    done
done
grep -m1 -E '^\[0\] mismatch abort: rank 0: [a-z]' "$TMP/out" | sed 's/^\[0\] /      /'
# A setting on rank 0 only that must be the same everywhere: init fails on all 3 ranks,
# naming it. rank0_only VAR VALUE (RINGLET_TRANSPORT alone used to wait for RINGLET_TIMEOUT,
# "waiting for rank 2 to connect").
rank0_only() {
    local var=$1 val=$2 rc n
    "$RUN" -n 3 --timeout 120 --grace 60 sh -c '[ "$RANK" = 0 ] && export "$1=$2"; exec "$3"' sh "$var" "$val" "$PROG" \
        >"$TMP/out" 2>&1
    rc=$?
    n=$(grep -c "FAIL: init (rank [0-9] of 3): $var is" "$TMP/out")
    if [ $rc != 0 ] && [ "$n" = 3 ]; then
        echo "ok:   $var on rank 0 only: init fails on all 3 ranks: $(grep -m1 -o "$var is.*" "$TMP/out")"
    else
        fails=$((fails + 1))
        echo "FAIL: $var on rank 0 only: exit $rc, $n of 3 ranks said so"
        tail -n 20 "$TMP/out"
    fi
}
rank0_only RINGLET_CHECK 1
rank0_only RINGLET_TRANSPORT tcp
# Without RINGLET_CHECK, calls that differ through the shared-memory board: an error on
# every rank (mismatch --board), not the bytes a peer's slot held before.
for cas in count kind root; do
    for P in 2 3; do
        RINGLET_TRANSPORT=shm "$RUN" -n $P --timeout 120 --grace 30 "$PROG" --board $cas >"$TMP/out" 2>&1
        rc=$?
        n=$(grep -cE "mismatch board: rank [0-9]+: [1-9][0-9]* checks, 0 failed" "$TMP/out")
        if [ "$n" = $P ]; then
            echo "ok:   board $cas P=$P: every rank's call failed: $(sed -n 's/^\[0\] mismatch board: [a-z]* -> //p' "$TMP/out")"
        else
            fails=$((fails + 1))
            echo "FAIL: board $cas P=$P (exit $rc, $n of $P ranks passed)"
            tail -n 20 "$TMP/out"
        fi
    done
done
# Without RINGLET_CHECK and the board, calls in another order on the two ranks whose
# messages have the same lengths (mismatch --order): each rank's first call that took
# the other call's message fails naming both, every call that succeeds holds the right
# data (before: a receive returned the peer's all-reduce input, as a success).
# Device buffers go over cuda_ipc (the simulated GPU unless RINGLET_TEST_DEVICE says cuda).
for tr in shm tcp ipc; do
    cases=("p2p 1000" "coll 1000 1000" "coll 1048576 524288")
    envs=(RINGLET_TRANSPORT=$tr)
    [ $tr = ipc ] && cases=("coll 1000 1000 --device" "coll 262144 131072 --device") &&
        envs=(RINGLET_DEVICE="${RINGLET_TEST_DEVICE:-sim}")
    for cas in "${cases[@]}"; do
        # shellcheck disable=SC2086 # the case's words are the program's arguments
        env RINGLET_BOARD_BYTES=0 "${envs[@]}" "$RUN" -n 2 --timeout 120 --grace 30 "$PROG" --order $cas \
            >"$TMP/out" 2>&1
        rc=$?
        # a rank whose every call failed has no result to check (0 checks): that its calls
        # failed is what this case asks, and some rank must name the other call
        n=$(grep -cE "mismatch order: rank [0-9]+: [0-9]+ checks, 0 failed" "$TMP/out")
        named=$(grep -cE "order: rank [0-9]+: [a-z(, )]+ -> [a-z_]+ #[0-9]+ .*the peer sent a message of its" "$TMP/out")
        if [ "$n" = 2 ] && [ "$named" -ge 1 ]; then
            echo "ok:   order $tr $cas: $(grep -m1 -oE 'rank [0-9]+: [a-z(, )]+ -> [a-z_]+ #[0-9]+ .*' "$TMP/out")"
        else
            fails=$((fails + 1))
            echo "FAIL: order $tr $cas (exit $rc, $n of 2 ranks passed, $named named the other call)"
            tail -n 20 "$TMP/out"
        fi
    done
done
[ $fails = 0 ] && { echo "mismatch: all passed"; exit 0; }
echo "mismatch: $fails failed"
exit 1

#!/usr/bin/env bash
# A rank is SIGKILLed inside a large collective (tests/mp/kill.c), P = 4, RINGLET_TIMEOUT=5,
# ringlet-run --grace 20 --timeout 60. The victim dies by construction, not by timing: the
# library's fault injection (RINGLET_FAULT_KILL, src/comm/fault.h) kills it just before it posts
# its N-th send (or receive) of the collective. Cases (64 MiB of float32, 512 KiB chunks, so
# each all-reduce segment is 16 MiB = 32 chunks):
#   1. rank 2 dies during an allreduce before its 2nd send (reduce-scatter, step 0): only its
#      first chunk left it, and every result element needs all of its input
#   2. rank 0, the bootstrap root, dies during an allreduce before send 3*32+1 (all-gather,
#      step 0): it had the only fully reduced copy of a segment, and sent one chunk of it
#   3. rank 3 dies during an allgather before its 2nd send: only one chunk of its block left
#   4. rank 1 dies during a broadcast from rank 0 before its 2nd send: the middle of the
#      chain 0 -> 1 -> 2 -> 3, so ranks 2 and 3 still need it
#   5. rank 3 dies during a broadcast from rank 0 before its 2nd receive: the end of the
#      chain, which nobody needs; a survivor may rightly finish, and is then checked for a
#      correct result and for its next call failing, naming rank 3
#   6. rank 2 dies during an allreduce of 1 KiB before its first send: over shared memory the
#      one-shot exchange through the board (nothing published), over tcp messages
#   7. (tcp) rank 0 dies during an allreduce of 1 KiB by recursive doubling before its 2nd
#      send, the first of the second step: the message count is the operation's, not the step's
# Each case passes when the launcher reports the victim's SIGKILL (exit 137), the victim
# logged the fault, exactly the three survivors print "survivor R: OK error in X s: <message
# naming rank V and the collective>" (X < 10), and no process of the job is left afterwards.
# RINGLET_TEST_TRANSPORTS (default "shm tcp") lists the transports to run it on. Then cases
# 1, 3 and 4 on device memory (RINGLET_TEST_DEVICE, default sim; "none" leaves them out),
# no transport forced: device buffers go over cuda_ipc between these ranks of one host.
# Exit 0 = all passed, 1 = a failure. Takes about 10-20 s per transport.
set -u

BUILD=${BUILD:-build}
RUN="$BUILD/bin/ringlet-run"
PROG="$BUILD/tests/mp/kill"
for f in "$RUN" "$PROG"; do
    if [ ! -x "$f" ]; then
        echo "FAIL: $f not found (build first, or set BUILD)"
        exit 1
    fi
done
case "$RUN" in /*) ;; *) RUN="$PWD/$RUN" ;; esac
case "$PROG" in /*) ;; *) PROG="$PWD/$PROG" ;; esac

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-kill.XXXXXX")
MARK="ringlet_kill_test_$$_$RANDOM"
# processes still running with MARK in their command line (every rank carries it in --tag)
leftovers() {
    if command -v pgrep >/dev/null 2>&1; then
        pgrep -f "$MARK" | grep -vx "$$" || true
    else
        # "[r]inglet..." matches the ranks' command lines but not this grep's own
        grep -l -a -- "[${MARK:0:1}]${MARK:1}" /proc/[0-9]*/cmdline 2>/dev/null | sed 's|/proc/||; s|/cmdline||' |
            grep -vx -e "$$" -e self || true
    fi
}
# shellcheck disable=SC2317  # called by the trap
cleanup() {
    local p
    for p in $(leftovers); do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT

fails=0
TRANSPORTS=${RINGLET_TEST_TRANSPORTS:-shm tcp}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

run_case() { # transport|ipc victim collective at [extra args]
    local tr=$1 victim=$2 coll=$3 at=$4
    shift 4
    local name="$tr: rank $victim killed during $coll at $at${*:+ $*}${CASE_ENV:+ ($CASE_ENV)}" ok=1 t rc dt r n line tenv="RINGLET_TRANSPORT=$tr"
    [ "$tr" = ipc ] && tenv="RINGLET_DEVICE=${RINGLET_TEST_DEVICE:-sim}"
    rm -rf "$TMP/sync" && mkdir "$TMP/sync"
    t=$(now_ms)
    env "$tenv" ${CASE_ENV:-} RINGLET_TIMEOUT=5 RINGLET_CHUNK_SIZE=512K "$RUN" -n 4 --grace 20 --timeout 60 \
        "$PROG" --victim "$victim" --coll "$coll" --at "$at" --sync "$TMP/sync" --mib "$MIB" "$@" --tag "$MARK" \
        >"$TMP/out" 2>"$TMP/err"
    rc=$?
    dt=$(($(now_ms) - t))
    if [ "$rc" != 137 ]; then
        echo "FAIL: $name: launcher exit status $rc, want 137 (the victim's SIGKILL)"
        ok=0
    fi
    if ! grep -qE "^\[$victim\] .*fault injection: SIGKILL in $coll #2 before posting" "$TMP/out" "$TMP/err"; then
        echo "FAIL: $name: the victim did not log the fault injection inside the $coll"
        ok=0
    fi
    n=$(grep -cE '^\[[0-9]+\] survivor [0-9]+: OK ' "$TMP/out")
    if [ "$n" != 3 ]; then
        echo "FAIL: $name: $n survivor OK lines, want 3"
        ok=0
    fi
    for r in 0 1 2 3; do
        [ "$r" = "$victim" ] && continue
        line=$(grep -E "^\[$r\] survivor $r: OK error in [0-9.]+ s: " "$TMP/out" | head -n 1)
        case "$line" in
        *"rank $victim"*"$coll"* | *"$coll"*"rank $victim"*) ;;
        *)
            echo "FAIL: $name: no OK line naming 'rank $victim' and '$coll' from survivor $r"
            ok=0
            ;;
        esac
    done
    # the launcher has returned: nothing of the job may be left (a SIGKILLed process needs a moment)
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        [ -z "$(leftovers)" ] && break
        sleep 0.2
    done
    if [ -n "$(leftovers)" ]; then
        echo "FAIL: $name: processes left behind: $(leftovers | tr '\n' ' ')"
        ok=0
    fi
    if [ $ok = 1 ]; then
        echo "ok:   $name (${dt} ms)"
        grep -E 'survivor [0-9]+: OK' "$TMP/out" | sed 's/^/      /'
    else
        fails=$((fails + 1))
        echo "----- output of the failed case:"
        cat "$TMP/out" "$TMP/err" | tail -n 40
        echo "-----"
    fi
}

# 64 MiB: 32 chunks of 512 KiB per all-reduce segment at P = 4 (so send 3*32+1 is the second
# send of the all-gather phase); the thread sanitizer gets 16 MiB (8 chunks: send 3*8+1).
MIB=64 AG=97
case "${SANITIZE:-}" in *thread*) MIB=16 AG=25 ;; esac
for tr in $TRANSPORTS; do
    run_case "$tr" 2 allreduce send:1
    run_case "$tr" 0 allreduce "send:$AG"
    run_case "$tr" 3 allgather send:1
    run_case "$tr" 1 broadcast send:1 --root 0
    run_case "$tr" 3 broadcast recv:1 --root 0
    # 1 KiB: through the board over shared memory (src/algo/board.h), messages over tcp
    run_case "$tr" 2 allreduce send:0 --kib 1
done
# recursive doubling: one message per step; the count is the operation's, across its steps
# (send 1 is rank 0's message of step 2, to rank 2; ranks 1 and 3 may finish, and then
# their next call must fail naming rank 0)
CASE_ENV=RINGLET_ALGO=doubling run_case tcp 0 allreduce send:1 --kib 1
if [ "${RINGLET_TEST_DEVICE:-sim}" != none ]; then
    run_case ipc 2 allreduce send:1 --memory device
    run_case ipc 3 allgather send:1 --memory device
    run_case ipc 1 broadcast send:1 --root 0 --memory device
fi

if [ $fails = 0 ]; then
    echo "kill: all passed"
    exit 0
fi
echo "kill: $fails failed"
exit 1

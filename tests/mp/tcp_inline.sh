#!/usr/bin/env bash
# TCP small messages moved by the calling threads, mixed with large ones on the same
# connections (tests/mp/tcp_inline.c), every byte checked: P = 2 (on a host with fewer
# cores than 2 per rank, as CI's, every one-part message is the callers'); P = 2 with
# RINGLET_TCP_INLINE_BYTES=64K (a host with cores for the socket threads: larger ones are
# the threads'); P = 3 with 3 sockets per peer; P = 2 with RINGLET_SPIN_US=0 (waiters hand
# their receives to the socket threads at once); and a length mismatch on the inline path
# (100 / 200 bytes), on the thread's (300000 / 200000, under the 64 KiB limit) and where
# the receive is striped over 4 sockets and the send is one part (4000 / 400000: the
# stripes that get nothing must end with the one that failed, not at the deadline),
# and, with 8 sockets per peer, two messages received in the other order (4 KiB in one
# part, 192 KiB in three) at 8 offsets of the message count:
# the receiver fails naming both lengths and the sender, the sender's next receive fails
# naming the receiver; and 2 MiB sent where 1 MiB is received, over TCP and shared memory
# (the message travels in 1 MiB pieces, the last one shorter: the receive's empty last
# piece meets the send's second full one; it ended well before). P = 3 with --emfile: a receive whose accept finds no descriptor left
# fails saying so, and a second receive then gets the message (--emfile 2: the same where
# the receive was parked, waiting for the connection). P = 4 and 5 (not under TSan)
# with --first-exchange: on fresh communicators every rank posts its receives from all the
# others before its sends (irecv, then isend or a blocking send), so the receives between
# ranks that are not ring neighbours wait for connections that the senders make only with
# those sends (again with RINGLET_ALGO=ring, whose all-reduce, joined while such a receive
# waits, connects none of those pairs itself); and --first-exchange 2: a receive from a rank that never sends fails at its
# communicator's deadline (4 s) saying that rank never connected; --first-exchange 3: an
# all-reduce's accept of one rank waits while a receive from another is parked, and only
# taking that receive's connection meanwhile lets the first rank come; --first-exchange 4: a
# parked receive that only the progress thread's idle poll can take, with every read of the
# wall clock an hour ahead of the clock that times waits (as if it were stepped back after
# each read): that poll's 10 ms must not depend on the wall clock. Cases 3 and 4 use one
# socket per peer, so that 24 MiB is more than the sockets hold on a machine of usual
# TCP buffer sizes. As root, also --two-comms
# (an irecv on one communicator completed while its owner blocks on another) in a network namespace whose
# TCP buffers are 4 KiB, so that the 64 KiB message cannot sit in the kernel: without a
# socket thread reading it, both ranks would wait out RINGLET_TIMEOUT (20 s there); the
# same over shared memory with 4 MiB (twice the FIFO; no root needed), where the
# communicator's progress thread moves the posted message. As root, also --slow: an isend /
# irecv of 80 MiB in a network namespace whose loopback is limited to 80 Mbit/s, with
# RINGLET_TIMEOUT=3: it takes some 8 s, and must succeed (the deadline counts time without
# progress, and a 1 MiB piece completes every 0.1 s); then an all-reduce of 40 MiB with
# RINGLET_ALGO=oneshot (each rank's buffer one message to the other, moved in 1 MiB waves),
# which must succeed too; not under ThreadSanitizer.
# Exit 0 = passed, 1 = failed.
set -u
BUILD=${BUILD:-build}
RUN="$BUILD/bin/ringlet-run"
PROG="$BUILD/tests/mp/tcp_inline"
for f in "$RUN" "$PROG"; do [ -x "$f" ] || { echo "FAIL: $f not found (build first)"; exit 1; }; done
ROUNDS=40
case "${SANITIZE:-}" in *thread*) ROUNDS=12 ;; esac
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-tcp-inline.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0
one() { # name P args... (environment before the name; WRAP: a command to run the launcher in)
    local name=$1 P=$2 rc n
    shift 2
    RINGLET_TRANSPORT=${TRANSPORT:-tcp} RINGLET_TIMEOUT=${RINGLET_TIMEOUT:-30} ${WRAP:-} "$RUN" -n "$P" --timeout 300 --grace 30 \
        "$PROG" --rounds "$ROUNDS" "$@" >"$TMP/out" 2>&1
    rc=$?
    n=$(grep -cE "tcp_inline: rank [0-9]+ of $P: [1-9][0-9]* checks, 0 failed" "$TMP/out")
    if [ "$rc" = 0 ] && [ "$n" = "$P" ]; then
        echo "ok:   $name: $(grep -m1 -oE '[0-9]+ checks' "$TMP/out") per rank"
        grep -E 'mismatch:|after the mismatch|descriptor left|never connected' "$TMP/out" | sed 's/^/      /'
    else
        fails=$((fails + 1))
        echo "FAIL: $name: launcher exit status $rc, $n of $P ranks passed"
        tail -n 30 "$TMP/out"
    fi
}
one "P=2" 2 --seed 1
RINGLET_TCP_INLINE_BYTES=65536 one "P=2, RINGLET_TCP_INLINE_BYTES=64K" 2 --seed 7
RINGLET_NSOCKS_PERPEER=3 one "P=3, 3 sockets per peer" 3 --seed 2
RINGLET_SPIN_US=0 one "P=2, RINGLET_SPIN_US=0" 2 --seed 3
one "P=2, length mismatch on the inline path" 2 --seed 4 --mismatch small
RINGLET_TCP_INLINE_BYTES=65536 one "P=2, length mismatch on the thread's path" 2 --seed 5 --mismatch large
RINGLET_NSOCKS_PERPEER=4 one "P=2, length mismatch, the receive striped over 4 sockets" 2 --seed 8 --mismatch striped
RINGLET_NSOCKS_PERPEER=8 one "P=2, messages received out of order, one part and striped, 8 sockets" 2 --seed 8 \
    --rounds 0 --mismatch order
one "P=2, 2 MiB sent, 1 MiB received (pieces)" 2 --seed 9 --rounds 2 --mismatch pieces
TRANSPORT=shm one "P=2, 2 MiB sent, 1 MiB received (pieces), shared memory" 2 --seed 9 --rounds 2 --mismatch pieces
# two communicators over shared memory: an irecv, then an isend, of 4 MiB (twice the FIFO)
# on one, completed while the owner blocks in an all-reduce on the other (its progress
# thread moves them)
TRANSPORT=shm RINGLET_TIMEOUT=20 one "P=2, two communicators, 4 MiB over shared memory" 2 --seed 6 --rounds 2 \
    --two-comms 4194304
one "P=3, no descriptor left for an accept" 3 --seed 9 --emfile 1
one "P=3, no descriptor left for the accept of a parked receive" 3 --seed 9 --emfile 2
RINGLET_NSOCKS_PERPEER=4 one "P=3, a connect of 4 sockets with 2 descriptors left, then again" 3 --seed 9 --emfile 3
one "P=4, receives from all posted before the sends (first messages)" 4 --seed 10 --first-exchange 1
RINGLET_ALGO=ring one "P=4, the same, all-reduces by the ring (none uses the pairs 0-2, 1-3)" 4 --seed 13 --first-exchange 1
if [[ "${SANITIZE:-}" != *thread* ]]; then
    one "P=5, receives from all posted before the sends (first messages)" 5 --seed 11 --first-exchange 1
fi
one "P=4, a receive from a rank that never sends (4 s deadline)" 4 --seed 12 --first-exchange 2
RINGLET_NSOCKS_PERPEER=1 RINGLET_ALGO=doubling one "P=4, an all-reduce's accept waits while a receive is parked" 4 --seed 14 --first-exchange 3
RINGLET_NSOCKS_PERPEER=1 one "P=4, a parked receive taken by the idle poll, the wall clock stepped back" 4 --seed 15 --first-exchange 4
if [ "$(id -u)" = 0 ] && unshare -n true 2>/dev/null; then
    cat >"$TMP/smallbuf" <<'EOF2'
#!/usr/bin/env bash
# runs "$@" in a new network namespace with loopback up and 4 KiB TCP buffers
ip link set lo up && sysctl -q -w net.ipv4.tcp_rmem="4096 4096 4096" net.ipv4.tcp_wmem="4096 4096 4096" && exec "$@"
EOF2
    chmod +x "$TMP/smallbuf"
    WRAP="unshare -n $TMP/smallbuf" \
        ROUNDS=2 RINGLET_TIMEOUT=20 one "P=2, two communicators, 4 KiB TCP buffers" 2 --seed 6 --two-comms 1
else
    echo "skip: P=2, two communicators (needs root and unshare -n for 4 KiB TCP buffers)"
fi
# isend / irecv of 80 MiB over loopback limited to 80 Mbit/s (about 8.4 s) with
# RINGLET_TIMEOUT=3, one socket: each 1 MiB piece takes 0.1 s, so the deadline, which counts
# time without progress, must not end it (it counted from the post before). Not under
# ThreadSanitizer: the heartbeats' 3 s over the throttled loopback leave it too little room.
if [[ "${SANITIZE:-}" == *thread* ]]; then
    echo "skip: P=2, a slow link (not under ThreadSanitizer)"
elif [ "$(id -u)" = 0 ] && unshare -n true 2>/dev/null && command -v tc >/dev/null; then
    cat >"$TMP/slowlink" <<'EOF2'
#!/usr/bin/env bash
# runs "$@" in a new network namespace whose loopback is limited to 80 Mbit/s (tbf passes no
# packet larger than its burst: the MTU 9000, the burst 256 KiB)
ip link set lo mtu 9000 up && tc qdisc add dev lo root tbf rate 80mbit burst 256kb latency 400ms && exec "$@"
EOF2
    chmod +x "$TMP/slowlink"
    if unshare -n "$TMP/slowlink" true; then
        WRAP="unshare -n $TMP/slowlink" RINGLET_TIMEOUT=3 RINGLET_NSOCKS_PERPEER=1 \
            one "P=2, 80 MiB isend/irecv over a slow link, RINGLET_TIMEOUT=3" 2 --seed 16 --rounds 0 --slow 83886080
        grep -h '^\[[01]\] slow link' "$TMP/out" | sed 's/^/      /'
        WRAP="unshare -n $TMP/slowlink" RINGLET_TIMEOUT=3 RINGLET_NSOCKS_PERPEER=1 RINGLET_ALGO=oneshot \
            one "P=2, a one-shot all-reduce of 40 MiB over a slow link, RINGLET_TIMEOUT=3" 2 --seed 17 --rounds 0 \
            --slow-allreduce 41943040
        grep -h '^\[[01]\] slow all-reduce' "$TMP/out" | sed 's/^/      /'
    else
        echo "skip: P=2, a slow link (tc cannot limit the loopback of a new namespace)"
    fi
else
    echo "skip: P=2, a slow link (needs root, unshare -n and tc)"
fi
[ $fails = 0 ] && { echo "tcp_inline: all passed"; exit 0; }
echo "tcp_inline: $fails failed"
exit 1

#!/usr/bin/env bash
# Bootstrap: unique id through a file; strangers, garbage and a port scan on rank 0's
# port while the job starts (must be refused without harm); a rank with the wrong
# secret (refused; init fails naming the rank that never joined); a rank that never
# shows up (init fails on the others within RINGLET_TIMEOUT, naming it, with the timeout's
# code); a rank whose init fails alone after the exchanges, or without a network interface
# before its transports start (the others quote its reason);
# MASTER_ADDR with two
# addresses that the ranks' resolvers order differently.
set -u
BUILD=${BUILD:-build}
bin=$BUILD/tests/mp/bootstrap
run=$BUILD/bin/ringlet-run
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null' EXIT
fail=0
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
check() { # name, command status
    if [ "$2" -eq 0 ]; then echo "ok: $1"; else echo "FAILED: $1"; fail=1; fi
}

# 1. Unique id handed over through a file, 4 ranks.
$run -n 4 --timeout 60 $bin uid "$tmp/id" >"$tmp/uid.log" 2>&1
[ "$(grep -c ': ok$' "$tmp/uid.log")" -eq 4 ]
check "unique id, 4 ranks" $?

# 2. Strangers on rank 0's port while the job starts: they connect (retrying until rank 0
#    listens) before ranks 1 and 2 are started, so rank 0 meets all four first, in order,
#    and refuses each (the silent one after its 5 s wait for a hello).
P=$(port)
export MASTER_ADDR=127.0.0.1 MASTER_PORT=$P WORLD_SIZE=3 RINGLET_SECRET=s3cret RINGLET_TIMEOUT=30
RANK=0 $bin env >"$tmp/s0.log" 2>&1 &
r0=$!
/usr/bin/python3 - "$P" "$tmp/strangers_in" <<'PY' >"$tmp/strangers.log" 2>&1 &
import socket, sys, time, os
port, mark = int(sys.argv[1]), sys.argv[2]
def conn():
    return socket.create_connection(("127.0.0.1", port), timeout=5)
until = time.monotonic() + 20
while True:                                     # a port scan, once rank 0 listens
    try:
        conn().close(); break
    except ConnectionRefusedError:
        if time.monotonic() > until: raise
        time.sleep(0.02)
s = conn(); s.sendall(os.urandom(4096)); s.close()   # garbage
s = conn(); s.settimeout(120); s.recv(64); s.sendall(b"\0" * 2000)  # reads the challenge (sent once rank 0 accepts), answers zeros
idle = conn()                                   # connects and says nothing
open(mark, "w").close()
time.sleep(8); idle.close()
print("strangers: done")
PY
strangers=$!
for _ in $(seq 400); do [ -e "$tmp/strangers_in" ] || ! kill -0 $strangers 2>/dev/null && break; sleep 0.05; done
RANK=1 $bin env >"$tmp/s1.log" 2>&1 &
r1=$!
RANK=2 $bin env >"$tmp/s2.log" 2>&1
s2=$?
wait $r0; s0=$?
wait $r1; s1=$?
wait $strangers; st=$?
refused=$(grep -c "refused a connection that did not authenticate" "$tmp/s0.log")
[ $s0 -eq 0 ] && [ $s1 -eq 0 ] && [ $s2 -eq 0 ] && [ $st -eq 0 ] && [ "$refused" = 4 ]
check "job starts despite strangers, garbage and a port scan (rank 0 refused $refused of 4; strangers exit $st)" $?
cat "$tmp/strangers.log"
cat "$tmp"/s?.log

# 2b. Silent strangers connect to rank 0's port, before ranks 1 and 2 start, and stay until
#     the job is up. Three, RINGLET_TIMEOUT=12: rank 0 gives each its 5 s for a hello at the
#     same time, beside the ranks' handshakes, so the job starts (one after another, they
#     took 15 s). 300, RINGLET_TIMEOUT=20: more than rank 0 waits on at once (32), so the
#     silent ones make way for those in the backlog after 0.25 s (32 every 5 s took 47 s).
#     100 that each send a byte every 0.1 s, RINGLET_TIMEOUT=12: they make way all the same
#     (0.25 s after their challenge, not after their last byte: they kept their places, 32
#     every 5 s, and the job failed at its deadline).
idle_strangers() { # count, deadline, silent|dribbling
P=$(port)
export MASTER_ADDR=127.0.0.1 MASTER_PORT=$P WORLD_SIZE=3 RINGLET_SECRET=s3cret RINGLET_TIMEOUT=$2
rm -f "$tmp/idle_in" "$tmp/idle_out"
RANK=0 $bin env >"$tmp/i0.log" 2>&1 &
r0=$!
/usr/bin/python3 - "$P" "$tmp/idle_in" "$tmp/idle_out" "$1" "$3" <<'PY' >"$tmp/idle.log" 2>&1 &
import socket, sys, time, os
port, mark, done, count = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
dribble = sys.argv[5] == "dribbling"
next_byte = 0
until = time.monotonic() + 20
held = []
def drip():  # a byte from each one still held, every 0.1 s (rank 0 closes those it lets go)
    global next_byte, held
    if not dribble or time.monotonic() < next_byte: return
    next_byte = time.monotonic() + 0.1
    kept = []
    for s in held:
        try:
            s.send(b"x", socket.MSG_DONTWAIT)
            kept.append(s)
        except OSError:
            s.close()
    held = kept
made = 0
while made < count:
    try:
        held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        made += 1
    except OSError:  # refused until rank 0 listens; a full backlog (somaxconn 128) may time out
        if time.monotonic() > until: raise
        time.sleep(0.02)
    drip()
open(mark, "w").close()
until = time.monotonic() + 60
while not os.path.exists(done) and time.monotonic() < until:   # held until the job is up
    drip()
    time.sleep(0.02)
for s in held: s.close()
print("idle strangers: done")
PY
idlers=$!
for _ in $(seq 400); do [ -e "$tmp/idle_in" ] || ! kill -0 $idlers 2>/dev/null && break; sleep 0.05; done
RANK=1 $bin env >"$tmp/i1.log" 2>&1 &
r1=$!
RANK=2 $bin env >"$tmp/i2.log" 2>&1
s2=$?
wait $r0; s0=$?
wait $r1; s1=$?
touch "$tmp/idle_out"
wait $idlers; st=$?
[ $s0 -eq 0 ] && [ $s1 -eq 0 ] && [ $s2 -eq 0 ] && [ $st -eq 0 ]
check "job starts beside $1 $3 strangers within a $2 s deadline" $?
cat "$tmp"/i?.log | grep -v "refused a connection"
}
idle_strangers 3 12 silent
idle_strangers 300 20 silent
idle_strangers 100 12 dribbling

# 3. A rank with the wrong secret is refused; init fails on rank 0 naming rank 1.
#    Rank 1, whose deadline is long, starts first and connects as soon as rank 0 listens:
#    rank 0's 3 s count from its own start, not from a slow start of rank 1's; rank 1's
#    failure must come from rank 0's refusal.
P=$(port)
export MASTER_PORT=$P WORLD_SIZE=2 RINGLET_TIMEOUT=3
RINGLET_SECRET=wrong RANK=1 RINGLET_TIMEOUT=60 $bin expect-fail "RINGLET_SECRET" >"$tmp/w1.log" 2>&1 &
w1=$!
RINGLET_SECRET=right RANK=0 $bin expect-fail "rank 1" >"$tmp/w0.log" 2>&1
s0=$?
wait $w1; s1=$?
cat "$tmp"/w?.log
[ $s0 -eq 0 ] && [ $s1 -eq 0 ]
check "wrong secret refused, named" $?

# 4. Rank 2 of 3 never shows up: ranks 0 and 1 fail within the deadline, naming it.
P=$(port)
export MASTER_PORT=$P WORLD_SIZE=3 RINGLET_TIMEOUT=3 RINGLET_SECRET=x
t0=$SECONDS
# told by rank 0 at its deadline: the job's timeout on both (RINGLET_ERR_TIMEOUT, 8), not a remote error
EXPECT_CODE=8 RANK=1 RINGLET_TIMEOUT=60 $bin expect-fail "rank 2" >"$tmp/m1.log" 2>&1 &
m1=$!
EXPECT_CODE=8 RANK=0 $bin expect-fail "rank 2" >"$tmp/m0.log" 2>&1
s0=$?
wait $m1; s1=$?
cat "$tmp"/m?.log
[ $s0 -eq 0 ] && [ $s1 -eq 0 ] && [ $((SECONDS - t0)) -le 20 ]
check "missing rank named by every rank within the deadline" $?

# 4b. The other way round (normal build only: a message, 11 s): rank 0's deadline is long,
#     rank 1 (RINGLET_TIMEOUT=1) joins once rank 0 listens, rank 2 never comes. Rank 1 waits
#     for the table until its deadline + 10 s and must say that rank 0 waits for the
#     others, not that it was refused (as "no table from rank 0" said, naming the secret).
if [ -z "${SANITIZE:-}" ]; then
    P=$(port)
    export MASTER_PORT=$P WORLD_SIZE=3 RINGLET_SECRET=x
    RANK=0 RINGLET_TIMEOUT=120 $bin expect-fail "rank 2" >"$tmp/l0.log" 2>&1 &
    l0=$!
    for _ in $(seq 600); do # rank 0 listening (60 s at most): rank 1's 1 s is its own
        ss -Hltn "sport = :$P" | grep -q . && break
        sleep 0.1
    done
    RANK=1 RINGLET_TIMEOUT=1 $bin expect-fail "sent no table by the deadline (RINGLET_TIMEOUT, + 10 s): it waits for all 3 ranks" \
        >"$tmp/l1.log" 2>&1
    s1=$?
    kill $l0 2>/dev/null
    wait $l0 2>/dev/null
    cat "$tmp/l1.log"
    [ $s1 -eq 0 ]
    check "rank 0 waits for a missing rank past a joined rank's deadline: said so" $?
fi

# 4c. Rank 1's init fails on its own after the exchanges (normal build only: an address
#     space limit, which the sanitizers' shadow memory does not fit): 16 chunks of 256 MiB
#     are more than its ulimit -v. Rank 0 must quote rank 1's reason, not take it for a
#     process that exited.
if [ -z "${SANITIZE:-}" ]; then
    P=$(port)
    export MASTER_PORT=$P WORLD_SIZE=2 RINGLET_SECRET=x
    RINGLET_CHUNK_SIZE=256M RINGLET_NCHUNKS_INFLIGHT=16 RANK=1 RINGLET_TIMEOUT=60 \
        sh -c 'ulimit -v 3000000 && exec "$@"' sh $bin expect-fail "out of memory for 16 chunks" >"$tmp/o1.log" 2>&1 &
    o1=$!
    RINGLET_CHUNK_SIZE=256M RINGLET_NCHUNKS_INFLIGHT=16 RANK=0 RINGLET_TIMEOUT=60 \
        $bin expect-fail 'it said: "its init failed: out of memory for 16 chunks' >"$tmp/o0.log" 2>&1
    s0=$?
    wait $o1; s1=$?
    cat "$tmp"/o?.log
    [ $s0 -eq 0 ] && [ $s1 -eq 0 ]
    check "a rank's own init failure after the exchanges: the others quote its reason" $?
fi

# 4d. Rank 1 has no network interface (RINGLET_SOCKET_IFNAME matches none) and fails before
#     its transports start; it still meets rank 0 at the exchange, so rank 0's init fails
#     quoting its reason (it waited until its deadline and said "rank 1 never joined").
P=$(port)
export MASTER_ADDR=127.0.0.1 MASTER_PORT=$P WORLD_SIZE=2 RINGLET_SECRET=x
RINGLET_SOCKET_IFNAME=nosuch0 RANK=1 RINGLET_TIMEOUT=60 \
    $bin expect-fail "no network interface matches RINGLET_SOCKET_IFNAME=nosuch0" >"$tmp/n1.log" 2>&1 &
n1=$!
RANK=0 RINGLET_TIMEOUT=30 \
    $bin expect-fail 'it said: "its init failed: no network interface matches RINGLET_SOCKET_IFNAME=nosuch0' >"$tmp/n0.log" 2>&1
s0=$?
wait $n1; s1=$?
cat "$tmp"/n?.log
[ $s0 -eq 0 ] && [ $s1 -eq 0 ]
check "a rank without a network interface: the others quote its reason" $?

# 5. MASTER_ADDR names a host with an IPv6 and an IPv4 address, and the ranks' resolvers
#    disagree (each rank in a mount namespace with its own /etc/hosts): rank 0 knows only the
#    IPv4 one (it listens on IPv4 alone), rank 1 both, ::1 first (the IPv6 one refuses: rank 1
#    must go on to the next, as it would past an address that does not reach rank 0); then
#    rank 0 knows both (it listens dual-stack) and rank 1 only the IPv4 one. 20 s deadline.
with_hosts() { # file command...: the command with /etc/hosts replaced by file
    unshare --mount sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$@"
}
name=rlboth-$$
printf '127.0.0.1 %s\n' "$name" >"$tmp/hosts4"
printf '::1 %s\n127.0.0.1 %s\n' "$name" "$name" >"$tmp/hosts46"
first6=$(with_hosts "$tmp/hosts46" getent ahostsv6 "$name" 2>/dev/null | head -n 1)
first=$(with_hosts "$tmp/hosts46" getent ahosts "$name" 2>/dev/null | awk 'NR == 1 {print $1}')
if [ "$first" != ::1 ] || [ -z "$first6" ]; then
    echo "skip: MASTER_ADDR with two addresses (needs unshare --mount as root and ::1 first: got '$first')"
else
    for order in "hosts4 hosts46" "hosts46 hosts4"; do
        set -- $order
        P=$(port)
        export MASTER_ADDR=$name MASTER_PORT=$P WORLD_SIZE=2 RINGLET_TIMEOUT=20 RINGLET_SECRET=x
        t0=$SECONDS
        RANK=0 with_hosts "$tmp/$1" $bin env >"$tmp/a0.log" 2>&1 &
        a0=$!
        RANK=1 with_hosts "$tmp/$2" $bin env >"$tmp/a1.log" 2>&1
        s1=$?
        wait $a0; s0=$?
        cat "$tmp"/a?.log
        [ $s0 -eq 0 ] && [ $s1 -eq 0 ]
        check "MASTER_ADDR=$name: rank 0 resolves it by $1, rank 1 by $2 ($((SECONDS - t0)) s)" $?
    done
fi
exit $fail

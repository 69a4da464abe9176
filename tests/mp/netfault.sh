#!/usr/bin/env bash
# Network faults as a multi-host job meets them (tests/mp/netfault.c). Four ranks, each in
# its own network namespace with its own RINGLET_HOSTID (so each believes it is a host of
# its own) and RINGLET_TRANSPORT=tcp, joined by veth pairs to a switch in a fifth
# namespace; launched here with torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR = rank
# 0's address, MASTER_PORT, RINGLET_SECRET). Every name (namespaces, links) carries this
# shell's pid, and everything is torn down on exit, also on failure; the host's own
# interfaces and routes are never touched.
#
# The switch: a Linux bridge, with the faults applied by the kernel (tc on each rank's
# egress), when the kernel has sch_netem; otherwise, for delay, loss and reordering,
# tests/mp/netfault_hub.c, a userspace switch that delays, drops and reorders frames the
# same way (NETFAULT_EMULATOR=netem or hub forces one; which one ran is printed).
#   (a) delay 20 ms on every packet (netem delay 20ms / hub --delay-ms 20)
#   (b) 1 % loss (netem loss 1% / hub --loss 1)
#   (c) reordering: delay 10 ms, 25 % of packets (50 % correlated on netem) go at once,
#       ahead of the delayed ones (netem delay 10ms reorder 25% 50% / hub --reorder 25)
#   (d) a rate limit of 40 Mbit/s on every rank's egress (tc tbf, with the bridge)
#   Each: 3 iterations (2 for (c), where TCP slows down much) of allreduce (one-shot and
#   ring sizes), allgather, broadcast, reduce_scatter and a barrier on integer data, every
#   result checked bit-exact on every rank, then a ping-pong between ranks 0-1 and 2-3. Also checked: the fault was real (a
#   ping-pong round trip takes at least twice the delay; the hub or the qdiscs dropped or
#   reordered packets; at the rate limit an allreduce takes at least the time its bytes
#   need, from the first rank's call to the last one's return).
#   (e) a cut in the middle of an allreduce, by construction: the victim arms the
#       library's RINGLET_FAULT_STOP=2:send:1, so it stops itself just before its second
#       send of the allreduce (only one chunk of its data can have left it, and every
#       survivor needs all of it); once it is seen stopped, its link goes down (the
#       switch's side of its veth, as a pulled cable), then it is continued.
#   (f) a peer stopped with SIGSTOP in the middle of an allreduce, the same way; it stays
#       stopped until every survivor has exited, then it is continued and must fail and
#       exit on its own.
#   (e) and (f) run with RINGLET_TIMEOUT=5 for victims 2 and 0 (rank 0 holds the
#   bootstrap's monitor connections). Every survivor's allreduce must fail with
#   RINGLET_ERR_REMOTE or _TIMEOUT within 15 s of its call (3x RINGLET_TIMEOUT), with a
#   message naming the victim's rank and the allreduce; the cut victim's must fail naming
#   a rank it lost; every process must exit on its own (waits are bounded; a process
#   still there is a hang, reported and killed). Neither fault closes a connection: the
#   survivors learn of it from the bootstrap monitor's heartbeats (src/comm/monitor.c), not
#   from the neighbour each happened to wait for.
# Closes with a table: fault, ranks that passed, ranks with a wrong result, hangs, times.
# NETFAULT_CASES="a b c d e1 e2 f1 f2" runs only the cases named.
# Needs root, ip and tc (iproute2), network namespaces and veth; otherwise it exits 77
# with "SKIP: <reason>". Sanitizer builds (SANITIZE set) use smaller counts. About 60-80 s.
# Exit 0 = all passed, 1 = a failure, 77 = skipped.
set -u

BUILD=${BUILD:-build}
PROG="$BUILD/tests/mp/netfault"
HUB="$BUILD/tests/mp/netfault_hub"
P=4
skip() {
    echo "SKIP: $*"
    exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root for network namespaces, veth and tc (running as uid $(id -u))"
for c in ip tc; do
    command -v "$c" >/dev/null 2>&1 || skip "no '$c' command (install iproute2)"
done
for f in "$PROG" "$HUB"; do
    if [ ! -x "$f" ]; then
        echo "FAIL: $f not found (build first, or set BUILD)"
        exit 1
    fi
done
case "$PROG" in /*) ;; *) PROG="$PWD/$PROG" HUB="$PWD/$HUB" ;; esac

N="rlnf$$"        # prefix of every namespace of this run
HNS="$N-sw"       # the switch's namespace
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-netfault.XXXXXX")
HUBPID=

# shellcheck disable=SC2317  # called by the trap
cleanup() {
    local ns p
    [ -n "$HUBPID" ] && kill -KILL "$HUBPID" 2>/dev/null
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$N-"); do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# ---- the network: r<i> -- veth -- switch namespace (bridge br0, or the hub) ----
if ! ip netns add "$HNS" 2>"$TMP/err"; then
    skip "cannot create a network namespace: $(head -c 200 "$TMP/err")"
fi
if ! ip -n "$HNS" link add br0 type bridge 2>"$TMP/err" || ! ip -n "$HNS" link set br0 up; then
    skip "cannot create a bridge in a namespace: $(head -c 200 "$TMP/err")"
fi
for r in $(seq 0 $((P - 1))); do
    ns="$N-r$r"
    ip netns add "$ns" || exit 1
    if ! ip -n "$HNS" link add "p$r" type veth peer name nf0 netns "$ns" 2>"$TMP/err"; then
        skip "cannot create veth pairs between namespaces: $(head -c 200 "$TMP/err")"
    fi
    # one packet per frame, so that loss, reordering and the rate act on packets
    ip -n "$ns" link set nf0 gso_max_size 1500 gso_max_segs 1 2>/dev/null
    ip -n "$ns" addr add "10.213.0.$((r + 1))/24" dev nf0 &&
        ip -n "$ns" link set lo up && ip -n "$ns" link set nf0 up &&
        ip -n "$HNS" link set "p$r" master br0 && ip -n "$HNS" link set "p$r" up || exit 1
done
MASTER=10.213.0.1

have_netem=0
if tc -n "$N-r0" qdisc add dev nf0 root netem delay 1ms 2>/dev/null; then
    have_netem=1
    tc -n "$N-r0" qdisc del dev nf0 root
fi
EMU=${NETFAULT_EMULATOR:-}
case "$EMU" in
'') EMU=$([ $have_netem = 1 ] && echo netem || echo hub) ;;
netem) [ $have_netem = 1 ] || skip "NETFAULT_EMULATOR=netem, but this kernel has no sch_netem" ;;
hub) ;;
*)
    echo "FAIL: NETFAULT_EMULATOR=$EMU: want netem or hub"
    exit 1
    ;;
esac
have_tbf=0
if tc -n "$N-r0" qdisc add dev nf0 root tbf rate 40mbit burst 16kb latency 400ms 2>/dev/null; then
    have_tbf=1
    tc -n "$N-r0" qdisc del dev nf0 root
fi
if [ "$EMU" = netem ]; then
    echo "emulator: the kernel (bridge, tc netem / tbf on each rank's egress)"
else
    echo "emulator: tests/mp/netfault_hub (this kernel has no sch_netem) for delay, loss and reordering;" \
        "the kernel bridge and tc tbf for the rest"
fi

now_ms() { echo $(($(date +%s%N) / 1000000)); }
# state of a process: R, S, T (stopped), Z, ... or "gone"
pstate() {
    local s
    s=$(cat "/proc/$1/stat" 2>/dev/null) || {
        echo gone
        return
    }
    s=${s##*) }
    echo "${s%% *}"
}
alive() { case $(pstate "$1") in gone | Z | X) return 1 ;; *) return 0 ;; esac }
# waits (at most $1 s) until none of the pids is alive; LEFT: those still alive. (Not in
# a $(...): a signal to this shell would wait for the subshell before the trap runs.)
LEFT=
wait_gone() {
    local until=$(($(now_ms) + $1 * 1000)) p
    shift
    while :; do
        LEFT=
        for p in "$@"; do alive "$p" && LEFT="$LEFT $p"; done
        [ -z "$LEFT" ] && return 0
        [ "$(now_ms)" -ge $until ] && return 1
        sleep 0.1
    done
}

# RANK_PIDS[r]: rank r's process (ip netns exec and env exec, so it is the program itself)
declare -a RANK_PIDS
SECRET=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
start_ranks() { # dir timeout args...
    local d=$1 t=$2 r
    shift 2
    for r in $(seq 0 $((P - 1))); do
        ip netns exec "$N-r$r" env RANK="$r" WORLD_SIZE=$P LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=$MASTER \
            MASTER_PORT=29500 RINGLET_SECRET="$SECRET" RINGLET_HOSTID="netfault-host$r" RINGLET_TRANSPORT=tcp \
            RINGLET_SOCKET_IFNAME==nf0 RINGLET_TIMEOUT="$t" RINGLET_CHUNK_SIZE=128K \
            "$PROG" "$@" --sync "$d" >"$d/out.$r" 2>"$d/err.$r" &
        RANK_PIDS[r]=$!
    done
}
# kills what is left of the ranks (after a failure)
kill_ranks() {
    local p
    for p in "${RANK_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
}
dump() { # dir
    local r
    echo "----- output of the failed case:"
    for r in $(seq 0 $((P - 1))); do
        sed "s/^/[$r] /" "$1/out.$r"
        tail -n 15 "$1/err.$r" | sed "s/^/[$r err] /"
    done
    [ -f "$1/hub" ] && sed 's/^/[hub] /' "$1/hub"
    echo "-----"
}

fails=0
RESULTS=()
record() { RESULTS+=("$(printf '%-44s %-9s %-13s %-6s %s' "$1" "$2" "$3" "$4" "$5")"); }

# ---- (a)-(d): collectives under delay, loss, reordering, a rate limit ----
COUNT=300001 ITERS=3
case "${SANITIZE:-}" in
*thread*) COUNT=40001 ITERS=2 ;;
?*) COUNT=100001 ITERS=2 ;;
esac

set_qdisc() { # tc arguments after "root" for every rank's nf0, or "" to remove them
    local r
    for r in $(seq 0 $((P - 1))); do
        tc -n "$N-r$r" qdisc del dev nf0 root 2>/dev/null
        if [ -n "$1" ]; then
            # shellcheck disable=SC2086
            tc -n "$N-r$r" qdisc add dev nf0 root $1 || return 1
        fi
    done
}
qdisc_drops() { # total packets the ranks' qdiscs dropped
    local r n=0 d
    for r in $(seq 0 $((P - 1))); do
        d=$(tc -s -n "$N-r$r" qdisc show dev nf0 | sed -n 's/.*dropped \([0-9]*\).*/\1/p' | head -n 1)
        n=$((n + ${d:-0}))
    done
    echo $n
}
use_hub() { # hub arguments: the ports leave the bridge, the hub forwards
    local r d=$1
    shift
    for r in $(seq 0 $((P - 1))); do ip -n "$HNS" link set "p$r" nomaster || return 1; done
    ip netns exec "$HNS" "$HUB" --ports p0,p1,p2,p3 --seed "$$" "$@" >"$d/hub" 2>&1 &
    HUBPID=$!
    local until=$(($(now_ms) + 20000))
    until grep -q '^hub: ready' "$d/hub"; do
        if ! alive $HUBPID || [ "$(now_ms)" -ge $until ]; then
            echo "FAIL: the hub did not start: $(cat "$d/hub")"
            return 1
        fi
        sleep 0.05
    done
}
stop_hub() { # back to the bridge
    local r
    if [ -n "$HUBPID" ]; then
        kill -TERM "$HUBPID" 2>/dev/null
        wait_gone 10 "$HUBPID" || kill -KILL "$HUBPID" 2>/dev/null
        wait "$HUBPID" 2>/dev/null
        HUBPID=
    fi
    for r in $(seq 0 $((P - 1))); do ip -n "$HNS" link set "p$r" master br0; done
}

leftovers() { # processes still in the ranks' namespaces
    local r
    for r in $(seq 0 $((P - 1))); do ip netns pids "$N-r$r" 2>/dev/null; done
}

work_case() { # name fault min_ms iterations netem_args hub_args (hub_args "-": the kernel even without netem)
    local name=$1 fault=$2 min_ms=$3 iters=$4 qd=$5 hubargs=$6 d="$TMP/${1%% *}" ok=1 t rc r how line ms n dt
    local hang=no
    mkdir -p "$d"
    if [ "$hubargs" != - ] && [ "$EMU" = hub ]; then
        how="hub $hubargs"
        # shellcheck disable=SC2086
        use_hub "$d" $hubargs || {
            fails=$((fails + 1))
            record "$name" "0/$P" - - "the hub did not start"
            return
        }
    else
        how="tc $qd"
        if ! set_qdisc "$qd"; then
            echo "FAIL: $name: tc qdisc add ... $qd failed"
            fails=$((fails + 1))
            record "$name" "0/$P" - - "tc failed"
            return
        fi
    fi
    t=$(now_ms)
    start_ranks "$d" 60 --mode work --iters "$iters" --count "$COUNT"
    wait_gone 150 "${RANK_PIDS[@]}"
    dt=$(($(now_ms) - t))
    if [ -n "$LEFT" ]; then
        echo "FAIL: $name: ranks still running after 150 s (a hang): pids$LEFT"
        ok=0
        hang=yes
        kill_ranks
    fi
    local good=0 wrong=0
    for r in $(seq 0 $((P - 1))); do
        wait "${RANK_PIDS[r]}"
        rc=$?
        line=$(grep -E "^rank $r: OK: " "$d/out.$r" | head -n 1)
        grep -q 'FAIL .*element' "$d/out.$r" && wrong=$((wrong + 1))
        if [ "$rc" != 0 ] || [ -z "$line" ] || grep -q FAIL "$d/out.$r"; then
            echo "FAIL: $name: rank $r exited $rc: $(grep -h -m 3 -E 'FAIL' "$d/out.$r" "$d/err.$r" | head -n 3)"
            ok=0
            continue
        fi
        good=$((good + 1))
        ms=$(sed -n 's/.*large allreduce span: min \([0-9]*\)\..*/\1/p' <<<"$line")
        if [ "$fault" = rate ] && [ "${ms:-0}" -lt "$min_ms" ]; then
            echo "FAIL: $name: the large allreduce took $ms ms at the least from the first rank's call to the last one's return, want >= $min_ms ms (is the limit applied?)"
            ok=0
        fi
        ms=$(sed -n 's/.*round trip to rank [0-9]*: min \([0-9]*\)\..*/\1/p' <<<"$line")
        if [ "$fault" = delay ] && [ $((r % 2)) = 0 ] && [ "${ms:-0}" -lt "$min_ms" ]; then
            echo "FAIL: $name: rank $r's round trip took $ms ms at the least, want >= $min_ms ms (is the delay applied?)"
            ok=0
        fi
    done
    if [ -n "$HUBPID" ]; then
        stop_hub
        line=$(grep '^hub: forwarded' "$d/hub")
        how="$how; $line"
        lost=$(sed -n 's/.* lost \([0-9]*\).*/\1/p' <<<"$line")
        n=$(sed -n 's/.* reordered \([0-9]*\).*/\1/p' <<<"$line")
        if { [ "$fault" = loss ] && [ "${lost:-0}" = 0 ]; } || { [ "$fault" = reorder ] && [ "${n:-0}" = 0 ]; }; then
            echo "FAIL: $name: the hub says it did not $fault any packet: $line"
            ok=0
        fi
    else
        n=$(qdisc_drops)
        how="$how; qdisc drops $n"
        if [ "$fault" = loss ] && [ "$n" = 0 ]; then
            echo "FAIL: $name: the qdiscs dropped no packet"
            ok=0
        fi
        set_qdisc ""
    fi
    if [ -n "$(leftovers)" ]; then
        echo "FAIL: $name: processes left in the namespaces: $(leftovers | tr '\n' ' ')"
        ok=0
    fi
    if [ $ok = 1 ]; then
        echo "ok:   $name ($how; $dt ms)"
        sed 's/^/      /' "$d"/out.*
    else
        fails=$((fails + 1))
        dump "$d"
    fi
    record "$name" "$good/$P" "$wrong ranks" "$hang" "${dt} ms"
}

# ---- (e), (f): a cut link, a stopped peer, in the middle of an allreduce ----
T=5 BOUND=15 MIB=16
case "${SANITIZE:-}" in *thread*) MIB=4 ;; esac

fault_case() { # name stop|cut victim
    local name=$1 kind=$2 v=$3 d="$TMP/${1%% *}$2$3" ok=1 t r rc st line others=() survived=0 hang=no times=
    mkdir -p "$d"
    t=$(now_ms)
    start_ranks "$d" $T --mode fault --fault "$kind" --victim "$v" --mib "$MIB" --bound "$BOUND"
    for r in $(seq 0 $((P - 1))); do [ "$r" != "$v" ] && others+=("${RANK_PIDS[r]}"); done
    # the victim stops itself inside the allreduce (RINGLET_FAULT_STOP)
    local until=$(($(now_ms) + 60000))
    while st=$(pstate "${RANK_PIDS[v]}") && [ "$st" != T ]; do
        if [ "$st" = gone ] || [ "$st" = Z ] || [ "$(now_ms)" -ge $until ]; then
            echo "FAIL: $name: the victim (rank $v) never stopped at the fault point (state $st)"
            ok=0
            break
        fi
        sleep 0.02
    done
    local t_stop=$(($(now_ms) - t)) t_gone=
    if [ $ok = 1 ] && [ "$kind" = cut ]; then
        ip -n "$HNS" link set "p$v" down
        kill -CONT "${RANK_PIDS[v]}"
    fi
    if [ $ok = 1 ]; then
        [ "$kind" = cut ] && others+=("${RANK_PIDS[v]}")
        if ! wait_gone 45 "${others[@]}"; then
            echo "FAIL: $name: still running 45 s after the fault (a hang): pids$LEFT"
            ok=0
            hang=yes
        fi
        t_gone=$(($(now_ms) - t))
    fi
    if [ "$kind" = stop ]; then
        # every survivor has gone: the victim, continued, must fail and exit on its own
        kill -CONT "${RANK_PIDS[v]}" 2>/dev/null
        if ! wait_gone 30 "${RANK_PIDS[v]}"; then
            echo "FAIL: $name: the stopped victim, continued after the survivors left, still runs after 30 s"
            ok=0
            hang=yes
        fi
    fi
    kill_ranks
    [ "$kind" = cut ] && ip -n "$HNS" link set "p$v" up
    if ! wait_gone 10 "${RANK_PIDS[@]}" || [ -n "$(leftovers)" ]; then
        echo "FAIL: $name: processes left in the namespaces: $(leftovers | tr '\n' ' ')"
        ok=0
    fi
    for r in $(seq 0 $((P - 1))); do
        wait "${RANK_PIDS[r]}" 2>/dev/null
        rc=$?
        if [ "$r" = "$v" ]; then
            line=$(grep -E "^rank $r: OK (stopped|cut) victim" "$d/out.$r" | head -n 1)
        else
            line=$(grep -E "^rank $r: OK survivor failed in [0-9.]+ s: " "$d/out.$r" | head -n 1)
            case "$line" in
            *"rank $v"*) ;;
            *) line= ;;
            esac
            [ -n "$line" ] && survived=$((survived + 1))
            times="$times $(sed -n 's/.*failed in \([0-9.]*\) s.*/\1/p' <<<"$line")"
        fi
        if [ "$rc" != 0 ] || [ -z "$line" ]; then
            echo "FAIL: $name: rank $r (exit $rc) did not report as required: $(grep -m 1 -E 'OK|FAIL' "$d/out.$r")"
            ok=0
        fi
    done
    if ! grep -q "fault injection: SIGSTOP in allreduce #2 before posting send 1" "$d/err.$v"; then
        echo "FAIL: $name: the victim did not log the fault injection inside the allreduce"
        ok=0
    fi
    local dt=$(($(now_ms) - t))
    if [ $ok = 1 ]; then
        echo "ok:   $name (victim stopped ${t_stop} ms after the start, the others gone at ${t_gone} ms, all at $dt ms)"
        for r in $(seq 0 $((P - 1))); do grep -E "^rank $r: (OK|abort)" "$d/out.$r" | sed 's/^/      /'; done
    else
        fails=$((fails + 1))
        dump "$d"
    fi
    record "$name" "$survived/$((P - 1))" "n/a" "$hang" "errors after${times} s"
}

# NETFAULT_CASES="a b c d e1 e2 f1 f2" (the default: all) runs only the cases named
want() { [ -z "${NETFAULT_CASES:-}" ] || grep -qw -- "$1" <<<"$NETFAULT_CASES"; }
# (a): a round trip crosses the delay twice (40 ms), however fast the rest is
want a && work_case "(a) delay 20 ms" delay 40 "$ITERS" "netem delay 20ms" "--delay-ms 20"
want b && work_case "(b) loss 1%" loss 0 "$ITERS" "netem loss 1%" "--loss 1"
# (c): TCP takes much reordering for loss and slows down: two iterations
want c && work_case "(c) reorder 25% (delay 10 ms)" reorder 0 2 "netem delay 10ms reorder 25% 50%" \
    "--delay-ms 10 --reorder 25"
if ! want d; then
    :
elif [ $have_tbf = 1 ]; then
    # an all-reduce of S bytes makes every rank send at least 2(P-1)/P S bytes (the bound the
    # ring meets); at 40 Mbit/s that takes this many ms at the least (90 %: the burst), from
    # the first rank's call to the last one's return (one rank's own time can be shorter: its
    # predecessor may have started earlier and sent ahead)
    work_case "(d) rate 40 Mbit/s" rate $((COUNT * 8 * 2 * (P - 1) * 8 * 9 / P / 400000)) "$ITERS" \
        "tbf rate 40mbit burst 16kb latency 400ms" -
else
    echo "note: (d) left out: this kernel has no tbf qdisc"
    record "(d) rate 40 Mbit/s" - - - "left out: no tbf"
fi
want e1 && fault_case "(e) cut rank 2's link inside an allreduce" cut 2
want e2 && fault_case "(e) cut rank 0's link inside an allreduce" cut 0
want f1 && fault_case "(f) SIGSTOP rank 1 inside an allreduce" stop 1
want f2 && fault_case "(f) SIGSTOP rank 0 inside an allreduce" stop 0

echo
printf '%-44s %-9s %-13s %-6s %s\n' "fault injected" survived "wrong results" hangs time
printf '%s\n' "${RESULTS[@]}"
if [ $fails = 0 ]; then
    echo "netfault: all passed"
    exit 0
fi
echo "netfault: $fails failed"
exit 1

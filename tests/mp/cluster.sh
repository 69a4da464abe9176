#!/usr/bin/env bash
# The ring across simulated hosts (issue 16): perf/cluster.sh builds H "hosts", each a network
# namespace with its own RINGLET_HOSTID and one veth link to a bridge in a switch namespace,
# rate-limited by tc tbf in both directions (200 Mbit/s here: a real limit that keeps the test
# short), and starts L ranks in each. Shapes (H x L): 2 x 2, 2 x 3 (ranks whose two ring
# neighbours are local beside ranks with a network neighbour: every rank must still pick the
# same chunk size) and 3 x 2; RINGLET_CLUSTER_SHAPES
# ("2x2 2x3 3x2" by default) chooses others.
#
# Asserted:
#   (a) the script itself, on the 2-host cluster (made with -d 100us: with sch_netem the links
#       get the delay, checked in tc's listing; without it up must say it did not apply it):
#       tbf of the asked rate on both directions of every host link; every rank's environment
#       (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, RINGLET_HOSTID, RINGLET_SOCKET_IFNAME,
#       MASTER_ADDR) and its namespace (the address on cl0), output prefixed "[rank] "; a rank
#       that fails makes run exit with its status; a run past its -t deadline is stopped (exit
#       124) and leaves no process in the namespaces; down leaves no namespace.
#   (b) for each shape, tests/mp/collectives --quick (every collective and dtype, two ops per
#       dtype, every op on four dtypes, at counts 0, 1, P-1, P+1 and 100003, in place or not,
#       blocking or not, every root; checked on every rank) over the cluster with
#       RINGLET_DEBUG=INFO, and from its log, on every rank: "local rank r%L of L" (ranks of one
#       host found each other through RINGLET_HOSTID), TCP on cl0 with that host's address; the
#       ring (each rank's logged prev / next) is one cycle through all P ranks, prev and next
#       agree, each host's ranks are contiguous in it, so it crosses host boundaries exactly H
#       times; every connection a rank made ("sending to / receiving from rank q over X") is
#       shm when q is on its host and tcp otherwise, and the ring's own edges are among them.
#       The bytes tbf sent on each direction of each host link grew by at least one large
#       float64 all-reduce's S = 8 x count (the ring puts 2(P-1)/P x S >= S on each), so the
#       traffic between hosts went through the limited links.
# No timing is asserted: deadlines only catch hangs. Sanitizer builds (SANITIZE set) use
# smaller large counts (30011; thread sanitizer 8191). About 40-60 s on a loaded 2-core VM. Needs root, ip and tc, network namespaces, veth and a bridge;
# otherwise it exits 77 with "SKIP: <reason>". Namespaces are named rlclt<pid>*, removed on exit.
# Exit 0 = all passed, 1 = a failure, 77 = skipped.
set -u

BUILD=${BUILD:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CL="$ROOT/perf/cluster.sh"
PROG="$BUILD/tests/mp/collectives"
skip() {
    echo "SKIP: $*"
    exit 77
}
[ "$EUID" = 0 ] || skip "needs root for network namespaces, veth and tc (running as uid $EUID)"
for c in ip tc; do
    command -v "$c" >/dev/null 2>&1 || skip "no '$c' command (install iproute2)"
done
if [ ! -x "$PROG" ]; then
    echo "FAIL: $PROG not found (build first, or set BUILD)"
    exit 1
fi
case "$PROG" in /*) ;; *) PROG="$PWD/$PROG" ;; esac

RATE=200mbit RATE_TC=200Mbit
NAME="rlclt$$"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-cluster.XXXXXX")
# shellcheck disable=SC2317  # called by the trap
cleanup() {
    local ns
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${NAME}[a-z0-9]*-"); do
        "$CL" down -n "${ns%-*}" >/dev/null 2>&1
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

SHAPES=${RINGLET_CLUSTER_SHAPES:-2x2 2x3 3x2}
# the transports chosen by themselves are asserted
unset RINGLET_TRANSPORT RINGLET_SHM_DISABLE
# --quick: every collective, each dtype with two ops (every op still on four dtypes); the full
# grid runs on one host in collectives.sh
ARGS="--quick --max-count 100003"
case "${SANITIZE:-}" in
*thread*) ARGS="--quick --max-count 8191" ;;
?*) ARGS="--quick --max-count 30011" ;;
esac
fails=0
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

# up NAME HOSTS [more args]: skips when this machine cannot make namespaces, veth or bridges
up() {
    local n=$1 h=$2
    shift 2
    if ! "$CL" up -n "$n" -H "$h" -r "$RATE" "$@" >"$TMP/up" 2>&1; then
        if grep -q "cannot create" "$TMP/up"; then skip "$(grep -m 1 "cannot create" "$TMP/up")"; fi
        fail "perf/cluster.sh up -n $n -H $h -r $RATE $*: $(cat "$TMP/up")"
        return 1
    fi
    sed 's/^/   /' "$TMP/up"
}
# bytes tbf sent on each host link: "h<i>.up N" (host -> switch) and "h<i>.down N"
link_bytes() { # name hosts
    local i
    for i in $(seq 0 $(($2 - 1))); do
        echo "h$i.up $(tc -s -n "$1-h$i" qdisc show dev cl0 | awk '/^qdisc tbf/ { t = 1 } t && /Sent/ { print $2; exit }')"
        echo "h$i.down $(tc -s -n "$1-sw" qdisc show dev "h$i" | awk '/^qdisc tbf/ { t = 1 } t && /Sent/ { print $2; exit }')"
    done
}
gone() { # no namespace of cluster $1 is left
    ! ip netns list 2>/dev/null | awk '{print $1}' | grep -qE "^$1-"
}

# ---- (a) the script itself, on 2 hosts with -d 100us
A="${NAME}a"
echo "== (a) perf/cluster.sh on 2 hosts"
if up "$A" 2 -d 100us; then
    ok=1
    netem=0
    tc -n "$A-h0" qdisc show dev cl0 | grep -q netem && netem=1
    for i in 0 1; do
        for where in "$A-h$i cl0" "$A-sw h$i"; do
            read -r ns dev <<<"$where"
            q=$(tc -n "$ns" qdisc show dev "$dev")
            grep -q "tbf .*rate $RATE_TC" <<<"$q" || {
                fail "(a) no tbf of $RATE_TC on $dev in $ns: $q"
                ok=0
            }
            if [ $netem = 1 ] && ! grep -q "netem .*delay 100us" <<<"$q"; then
                fail "(a) sch_netem works here, but $dev in $ns has no 100us delay: $q"
                ok=0
            fi
        done
    done
    if [ $netem = 0 ] && ! grep -q "NO delay (-d 100us asked, but the kernel has no sch_netem)" "$TMP/up"; then
        fail "(a) no netem delay on the links, and up did not say why"
        ok=0
    fi
    # environment and namespace of every rank
    # shellcheck disable=SC2016  # expanded by the ranks' shell
    "$CL" run -n "$A" -p 2 -t 60 -- sh -c 'echo "env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $RINGLET_HOSTID \
$RINGLET_SOCKET_IFNAME $MASTER_ADDR $(ip -4 -o addr show dev cl0 | awk "{print \$4}")"' >"$TMP/env" 2>&1
    rc=$?
    envok=1
    for r in 0 1 2 3; do
        want="[$r] env $r 4 $((r % 2)) 2 $A-h$((r / 2)) =cl0 10.214.0.1 10.214.0.$((r / 2 + 1))/24"
        grep -qxF "$want" "$TMP/env" || {
            fail "(a) rank $r's environment: want '$want'"
            envok=0
        }
    done
    if [ $envok = 0 ] || [ $rc != 0 ]; then
        fail "(a) the environment run exited $rc; it said:"
        sed 's/^/      | /' "$TMP/env"
        ok=0
    fi
    # a failing rank decides the exit status
    # shellcheck disable=SC2016
    "$CL" run -n "$A" -p 2 -t 60 -- sh -c '[ "$RANK" != 3 ] || exit 7' >"$TMP/fail" 2>&1
    rc=$?
    [ $rc = 7 ] || {
        fail "(a) rank 3 exited 7, run exited $rc: $(cat "$TMP/fail")"
        ok=0
    }
    # the deadline: stopped, exit 124, nothing left (also not what a rank started)
    "$CL" run -n "$A" -p 2 -t 2 -- sh -c 'sleep 120 & sleep 120' >"$TMP/hang" 2>&1
    rc=$?
    left="$(ip netns pids "$A-h0") $(ip netns pids "$A-h1")"
    if [ $rc != 124 ] || [ -n "${left// /}" ]; then
        fail "(a) a run past its deadline: exit $rc (want 124), processes left: '${left// /}': $(cat "$TMP/hang")"
        ok=0
    fi
    "$CL" down -n "$A"
    gone "$A" || {
        fail "(a) namespaces left after down: $(ip netns list | grep "$A")"
        ok=0
    }
    [ $ok = 1 ] && echo "ok:   (a) links (tbf $RATE_TC both ways, netem $([ $netem = 1 ] && echo 'delay 100us' || echo 'absent: no delay')), environment, exit status, deadline, down"
fi

# ---- (b) collectives on H x L
# check_log HOSTS PER NAME ERRFILE: the INFO log's local ranks, interfaces, ring and transports
check_log() {
    local H=$1 L=$2 n=$3 f=$4 P=$(($1 * $2)) r q h line tr ok=1
    local -a next prev
    for r in $(seq 0 $((P - 1))); do
        h=$((r / L))
        line=$(grep -m 1 -E "^\[$r\] ringlet\[rank $r pid [0-9]+\] INFO: $P ranks, local rank " "$f")
        if [[ ! "$line" =~ "local rank "([0-9]+)" of "([0-9]+)";".*"TCP on interface "([^ ]+)" ("([0-9.]+):[0-9]+"); ring prev "([0-9]+)" next "([0-9]+)";" ]]; then
            echo "rank $r: no 'P ranks, local rank ...; ring prev .. next ..' line at INFO"
            return 1
        fi
        if [ "${BASH_REMATCH[1]}" != $((r % L)) ] || [ "${BASH_REMATCH[2]}" != "$L" ]; then
            echo "rank $r: local rank ${BASH_REMATCH[1]} of ${BASH_REMATCH[2]}, want $((r % L)) of $L (RINGLET_HOSTID $n-h$h)"
            ok=0
        fi
        if [ "${BASH_REMATCH[3]}" != cl0 ] || [ "${BASH_REMATCH[4]}" != "10.214.0.$((h + 1))" ]; then
            echo "rank $r: TCP on ${BASH_REMATCH[3]} (${BASH_REMATCH[4]}), want cl0 (10.214.0.$((h + 1)))"
            ok=0
        fi
        prev[r]=${BASH_REMATCH[5]} next[r]=${BASH_REMATCH[6]}
    done
    # the ring: one cycle through every rank, prev and next agreeing, each host contiguous
    local seen="" cross=0 steps=0 hosts_done="" cur
    r=0
    while :; do
        q=${next[r]}
        if [ "$q" -ge $P ] || [ "${prev[q]}" != "$r" ]; then
            echo "ring: rank $r's next is $q, whose prev is ${prev[q]:-?}"
            return 1
        fi
        seen="$seen $r"
        steps=$((steps + 1))
        if [ $((r / L)) != $((q / L)) ]; then
            cross=$((cross + 1))
            # leaving host r/L: it must not come back
            hosts_done="$hosts_done $((r / L))"
            [[ " $hosts_done " == *" $((q / L)) "* ]] && [ "$q" != 0 ] && {
                echo "ring: host $((q / L)) is entered twice (its ranks are not contiguous):$seen"
                ok=0
            }
        fi
        r=$q
        [ "$r" = 0 ] && break
        [ $steps -gt $P ] && break
    done
    [ $steps = $P ] || {
        echo "ring: following next from rank 0 returns after $steps steps, not $P:$seen"
        ok=0
    }
    [ $cross = "$H" ] || {
        echo "ring: crosses a host boundary $cross times, want $H (once per host):$seen"
        ok=0
    }
    # transports: shm on the host, tcp between hosts; the ring's edges connected
    cur=$(grep -cE "^\[[0-9]+\] ringlet\[rank [0-9]+ pid [0-9]+\] INFO: (sending to|receiving from) rank [0-9]+ over " "$f")
    [ "$cur" -ge $((2 * P)) ] || {
        echo "transports: only $cur 'sending to / receiving from rank q over X' lines, want >= $((2 * P))"
        ok=0
    }
    while read -r r q tr; do
        if [ $((r / L)) = $((q / L)) ]; then want=shm; else want=tcp; fi
        [ "$tr" = $want ] || {
            echo "transports: rank $r (host $((r / L))) and rank $q (host $((q / L))) over $tr, want $want"
            ok=0
        }
    done < <(sed -nE 's/^\[([0-9]+)\] ringlet\[rank [0-9]+ pid [0-9]+\] INFO: (sending to|receiving from) rank ([0-9]+) over ([a-z_]+).*/\1 \3 \4/p' "$f")
    for r in $(seq 0 $((P - 1))); do
        if ! grep -qE "^\[$r\] ringlet\[rank $r pid [0-9]+\] INFO: sending to rank ${next[r]} over " "$f" ||
            ! grep -qE "^\[$r\] ringlet\[rank $r pid [0-9]+\] INFO: receiving from rank ${prev[r]} over " "$f"; then
            echo "transports: rank $r logged no connection to its ring next ${next[r]} or from its prev ${prev[r]}"
            ok=0
        fi
    done
    [ $ok = 1 ] && echo "ring:$seen"
    [ $ok = 1 ]
}

for shape in $SHAPES; do
    H=${shape%x*} L=${shape#*x}
    if ! [[ "$H" =~ ^[0-9]+$ && "$L" =~ ^[0-9]+$ ]] || [ "$H" -lt 2 ] || [ "$L" -lt 1 ]; then
        fail "RINGLET_CLUSTER_SHAPES: '$shape' is not HxL with H >= 2"
        continue
    fi
    P=$((H * L))
    n="${NAME}b$H$L"
    args=$ARGS
    large=${args##*--max-count }
    large=${large%% *}
    echo "== (b) $H hosts x $L ranks: collectives $args"
    up "$n" "$H" || continue
    link_bytes "$n" "$H" >"$TMP/before"
    t0=$(date +%s)
    # shellcheck disable=SC2086  # $args: several words
    RINGLET_DEBUG=INFO RINGLET_TIMEOUT=60 "$CL" run -n "$n" -p "$L" -t 300 -g 30 -- \
        "$PROG" $args >"$TMP/out" 2>"$TMP/err"
    rc=$?
    dt=$(($(date +%s) - t0))
    link_bytes "$n" "$H" >"$TMP/after"
    ok=1
    good=$(grep -cE "^\[[0-9]+\] collectives: rank [0-9]+ of $P: [1-9][0-9]* cases checked, 0 failed" "$TMP/out")
    if [ $rc != 0 ] || [ "$good" != $P ]; then
        fail "(b) $shape: run exited $rc, $good of $P ranks passed ($dt s)"
        grep -E 'FAIL|collectives: rank' "$TMP/out" | head -n 40
        grep -vE ' INFO: ' "$TMP/err" | tail -n 20
        ok=0
    fi
    if ! why=$(check_log "$H" "$L" "$n" "$TMP/err"); then
        fail "(b) $shape: the INFO log:"
        echo "$why" | head -n 20 | sed 's/^/      /'
        grep -E 'INFO: ([0-9]+ ranks|sending|receiving)' "$TMP/err" | head -n 40 | sed 's/^/      | /'
        ok=0
    fi
    while read -r link b0; do
        b1=$(awk -v l="$link" '$1 == l { print $2 }' "$TMP/after")
        if ! [[ "$b0" =~ ^[0-9]+$ && "$b1" =~ ^[0-9]+$ ]] || [ $((b1 - b0)) -lt $((large * 8)) ]; then
            fail "(b) $shape: tbf on link $link sent $((${b1:-0} - ${b0:-0})) bytes, want >= $((large * 8)) (one float64 allreduce of $large)"
            ok=0
        fi
    done <"$TMP/before"
    "$CL" down -n "$n"
    gone "$n" || {
        fail "(b) $shape: namespaces left after down"
        ok=0
    }
    if [ $ok = 1 ]; then
        cases=$(sed -n "s/^\[0\] collectives: rank 0 of $P: \([0-9]*\) cases checked.*/\1/p" "$TMP/out")
        sent=$(awk '{ print $1 "=" int($2 / 1048576) "M" }' "$TMP/after" | tr '\n' ' ')
        echo "ok:   (b) $shape: $cases cases on each of $P ranks, $dt s; shm inside hosts, tcp between," \
            "$why (crossing $H host boundaries, once each); tbf sent: $sent"
    fi
done

if [ $fails = 0 ]; then
    echo "cluster: all passed"
    exit 0
fi
echo "cluster: $fails failed"
exit 1

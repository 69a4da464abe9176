#!/usr/bin/env bash
# A simulated cluster on one machine (issue 16): H "hosts", each a Linux network namespace
# with one link to a switch, for tests and benchmarks of ringlet across hosts.
#
#   perf/cluster.sh up    -H hosts -r rate [-d delay] [-m mtu] [-n name]
#   perf/cluster.sh run   -n name -p ranks-per-host [-H hosts] [-t seconds] [-g seconds] [-P port] -- prog args...
#   perf/cluster.sh show  -n name
#   perf/cluster.sh down  [-n name]
#   perf/cluster.sh bench [-r rate] [-d delay] [-s size] [-H "2 4"] [-p ranks-per-host] [-i iters] [-w warmup]
#                         [-m mtu] [-t seconds]
#   perf/cluster.sh rsh   host command...
#
# The network. Host i (0 <= i < H) is the namespace <name>-h<i>; its one interface cl0 has
# 10.214.0.(i+1)/24 and is one end of a veth pair whose other end, h<i>, is a port of the bridge
# br0 in the switch namespace <name>-sw. The host's own interfaces, routes and firewall are never
# touched: everything lives in namespaces whose names begin with "rlcl" (a name given with -n is
# prefixed with it when it does not already; tests/mp/netfault.sh uses "rlnf"). The default name
# is rlcl<pid of up>; up prints it.
#
# The links. Each host link is limited like a NIC: a tbf qdisc of rate -r on BOTH directions, the
# egress of cl0 (host -> switch) and the egress of h<i> (switch -> host). Rates use tc's units:
# bit, kbit, mbit, gbit (powers of 1000, bits/s) or bps, kbps, mbps, gbps (BYTES/s, as in tc);
# "-r none" leaves the links unlimited. tbf's bucket is max(128 KiB, 2 ms at the rate), so that a
# 64 KiB GSO packet passes whole; its queue holds the bucket plus 50 ms at the rate, at least 1 MiB
# (about a NIC's 1000-packet queue at MTU 1500).
# Delay (-d, e.g. 100us, 1ms) needs the kernel's sch_netem; where it exists, up puts a netem
# "delay D" at the root of both egress qdiscs with the tbf under it, so a packet from one host
# to another crosses two links: 2D one way, 4D round trip. Where the kernel has no netem (this
# project's development VM and its CI: Firecracker kernels without sch_netem, and no modules to
# load), up says so and the cluster has the rate limits only.
#
# Running ranks. run starts -p ranks in each of the first -H hosts (default: every host of the
# cluster), ranks of one host consecutive (host i has ranks i*p .. i*p+p-1), each with the
# variables torchrun sets and ringlet reads: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
# GROUP_RANK (the host), GROUP_WORLD_SIZE, MASTER_ADDR (host 0's address, 10.214.0.1),
# MASTER_PORT (-P, else a random one; the namespaces are private, so only another run in the
# same cluster could take it), RINGLET_SECRET (kept when set, else 32 random hex digits),
# RINGLET_HOSTID=<name>-h<i> and RINGLET_SOCKET_IFNAME==cl0 (exact match), plus the caller's
# environment (so `RINGLET_DEBUG=INFO perf/cluster.sh run ...` works); stdin is /dev/null.
# Every line a rank writes is forwarded with a "[rank] " prefix, stdout to stdout, stderr to
# stderr. run waits at most -t seconds (default 300) for all ranks; after the first rank fails the others get -g seconds
# (default 10) to end on their own. Then what is left gets SIGTERM, and SIGKILL 3 s later,
# including any process a rank started (found by a per-run variable, RLCL_RUN, in the cluster's
# namespaces). Exit status, as ringlet-run's: 0 when every rank exited 0, else the first failing
# rank's status (128+signal when a signal ended it), 124 when the deadline stopped the run, 2 on a
# usage error.
#
# bench brings up a cluster of max(-H) hosts at rate -r (default 1gbit) and delay -d (default
# none), runs build/bin/ringlet-perf allreduce (float sum, host buffers, results checked) at size
# -s (default 256M) for each H in -H (default "2 4") with -p ranks per host (default 2), -i timed
# iterations (default 5) and -w warm-up ones (default 1) per form, prints busbw next to the link
# bound, and tears the cluster down ($BUILD, default build/, holds ringlet-perf). Minutes at the
# defaults; not part of the tests. ringlet-perf prints busbw with two
# decimals; bench computes it from the time column (us, one decimal) to keep the digits.
#
# The link bound. P = H x L ranks; ranks of one host sit next to each other in the ring, so the
# ring crosses each host boundary exactly once: host i's last rank sends to host i+1's first.
# Ring all-reduce of S bytes: reduce-scatter and all-gather are P-1 steps each, and in every
# step every rank sends S/P bytes to its ring successor, so every ring edge carries
# 2(P-1)/P x S bytes in its direction. Host i's link carries exactly one ring edge out (its last
# rank -> host i+1) and one in (host i-1 -> its first rank); edges inside a host go over shared
# memory and never touch it. With link rate R bytes/s per direction:
#     time >= 2(P-1)/P x S / R,   algbw = S / time <= R / (2(P-1)/P),
#     busbw = algbw x 2(P-1)/P <= R            (for every H >= 2 and every L)
# R counts wire bytes (tbf counts each frame with its Ethernet, IP and TCP headers), so the
# payload can reach at most R x (MTU - 52) / (MTU + 14) (TCP with timestamps: 40 + 12 header
# bytes per MTU-sized IP packet, plus a 14-byte Ethernet header): 95.6% of R at MTU 1500. bench
# prints both and the share of R.
#
# rsh is a stand-in for ssh that launchers such as Open MPI's (--mca plm_rsh_agent "perf/cluster.sh rsh")
# call as "agent host command...": host is a cluster host's namespace name (<name>-h<i>); the command
# words are joined with spaces and run by sh -c in that namespace, as ssh runs them on a remote host,
# in a UTS namespace of its own whose hostname is the host's name (the hosts share this machine's
# hostname otherwise, and Open MPI names its shared-memory files after the hostname: ranks of two
# hosts would collide). Exit status: the command's; 2 on a usage error. perf/compare --cluster uses
# it (and runs mpirun itself in host 0's namespace, with that hostname, so that the daemons reach it).
#
# Needs root, ip and tc (iproute2), network namespaces, veth, bridge and (for -r) tbf; rsh needs
# unshare (util-linux).
# tests/mp/cluster.sh (in make test) uses up / run / down; nothing runs bench but a person.
set -u

NS_PREFIX=rlcl
SUBNET=10.214.0
IF_HOST=cl0
BR=br0
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

usage() {
    echo usage: >&2
    sed -n '5,11s/^# \{0,1\}//p' "$SELF" >&2
    exit 2
}
die() {
    echo "cluster.sh: $*" >&2
    exit 1
}
bad() {
    echo "cluster.sh: $*" >&2
    exit 2
}
need_root() {
    [ "$EUID" = 0 ] || die "needs root (network namespaces, veth, tc); running as uid $EUID"
    local c
    for c in ip tc; do
        command -v "$c" >/dev/null 2>&1 || die "no '$c' command (install iproute2)"
    done
}
# integer $1 within [$2, $3]
in_range() { [[ "$1" =~ ^[0-9]{1,9}$ ]] && [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# name given with -n -> the cluster's name (letters, digits, _; begins with rlcl)
norm_name() {
    local n=$1
    [[ "$n" =~ ^[A-Za-z0-9_]{1,40}$ ]] || bad "-n $n: want letters, digits or _ (at most 40)"
    case "$n" in "$NS_PREFIX"*) ;; *) n="$NS_PREFIX$n" ;; esac
    echo "$n"
}
# every namespace of cluster $1 (or of every cluster when $1 is empty)
cluster_ns() {
    local pat
    if [ -n "$1" ]; then pat="^$1-(sw|h[0-9]+)\$"; else pat="^${NS_PREFIX}[A-Za-z0-9_]*-(sw|h[0-9]+)\$"; fi
    ip netns list 2>/dev/null | awk '{print $1}' | grep -E "$pat"
}
# number of hosts of cluster $1 (h0, h1, ... without a gap)
cluster_hosts() {
    local n=0
    while [ -e "/run/netns/$1-h$n" ]; do n=$((n + 1)); done
    echo $n
}

# rate in tc's units -> bits per second (integer); "none" -> 0
rate_bits() {
    local r=${1,,} num unit mul
    [ "$r" = none ] && {
        echo 0
        return
    }
    [[ "$r" =~ ^([0-9]+(\.[0-9]+)?)([kmgt]?)(bit|bps)$ ]] || return 1
    num=${BASH_REMATCH[1]} unit=${BASH_REMATCH[3]}
    case "$unit" in '') mul=1 ;; k) mul=1000 ;; m) mul=1000000 ;; g) mul=1000000000 ;; t) mul=1000000000000 ;; esac
    [ "${BASH_REMATCH[4]}" = bps ] && mul=$((mul * 8))
    awk -v n="$num" -v m="$mul" 'BEGIN { v = n * m; if (v < 8000) exit 1; printf "%.0f\n", v }'
}
# size with K/M/G (powers of 1024) -> bytes
size_bytes() {
    [[ "$1" =~ ^([0-9]+)([KMGkmg]?)$ ]] || return 1
    local n=${BASH_REMATCH[1]}
    case "${BASH_REMATCH[2],,}" in k) n=$((n << 10)) ;; m) n=$((n << 20)) ;; g) n=$((n << 30)) ;; esac
    echo "$n"
}

# ------------------------------------------------------------------------------------------ down
down_cluster() { # name ("" = every rlcl cluster)
    local ns p left
    for ns in $(cluster_ns "$1"); do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    done
    for ns in $(cluster_ns "$1"); do
        # the processes killed above may take a moment to leave the namespace
        local until=$(($(now_ms) + 5000))
        while left=$(ip netns pids "$ns" 2>/dev/null) && [ -n "$left" ] && [ "$(now_ms)" -lt $until ]; do
            sleep 0.05
        done
        ip netns del "$ns" 2>/dev/null || echo "cluster.sh: could not delete namespace $ns" >&2
    done
    [ -z "$(cluster_ns "$1")" ]
}

cmd_down() {
    local name="" o
    OPTIND=1
    while getopts n:h o; do
        case $o in
        n) name=$(norm_name "$OPTARG") || exit 2 ;;
        *) usage ;;
        esac
    done
    need_root
    down_cluster "$name" || die "some namespaces of ${name:-the rlcl clusters} are left"
}

# -------------------------------------------------------------------------------------------- up
UP_NAME=
# shellcheck disable=SC2317  # called by the trap
up_abort() {
    [ -n "$UP_NAME" ] && down_cluster "$UP_NAME"
}

# quiet links: no IPv6 (router solicitations, DAD, MLD) in namespace $1
no_ipv6() {
    ip netns exec "$1" sh -c 'echo 1 >/proc/sys/net/ipv6/conf/default/disable_ipv6;
        echo 1 >/proc/sys/net/ipv6/conf/all/disable_ipv6' 2>/dev/null
}

# tc qdiscs of one egress: rate (bits/s, 0 = none), delay ("" = none)
set_link() { # ns dev bits delay
    local ns=$1 dev=$2 bits=$3 delay=$4 bytes burst limit parent=root
    tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null
    if [ -n "$delay" ]; then
        # netem's own queue: a second at the delay's worst case is far more than ever waits
        tc -n "$ns" qdisc add dev "$dev" root handle 1: netem delay "$delay" limit 100000 || return 1
        parent="parent 1:1"
    fi
    [ "$bits" = 0 ] && return 0
    bytes=$((bits / 8))
    burst=$((bytes / 500))
    [ $burst -lt 131072 ] && burst=131072
    limit=$((burst + bytes / 20))
    [ $limit -lt 1048576 ] && limit=1048576
    # shellcheck disable=SC2086  # parent is two words
    tc -n "$ns" qdisc add dev "$dev" $parent handle 10: tbf rate "${bits}bit" burst "$burst" limit "$limit"
}

cmd_up() {
    local hosts="" rate="" delay="" name="" mtu=1500 o bits i ns sw err
    OPTIND=1
    while getopts H:r:d:n:m:h o; do
        case $o in
        H) hosts=$OPTARG ;;
        r) rate=$OPTARG ;;
        d) delay=$OPTARG ;;
        n) name=$(norm_name "$OPTARG") || exit 2 ;;
        m) mtu=$OPTARG ;;
        *) usage ;;
        esac
    done
    in_range "$hosts" 1 250 || bad "up: -H hosts (1..250) is required"
    [ -n "$rate" ] || bad "up: -r rate is required (e.g. 1gbit, 200mbit, or none)"
    bits=$(rate_bits "$rate") || bad "up: -r $rate: want a rate such as 1gbit, 200mbit, 12.5mbps, or none"
    [ -z "$delay" ] || [[ "$delay" =~ ^[0-9]+(\.[0-9]+)?(us|usec|ms|msec|s|sec)$ ]] ||
        bad "up: -d $delay: want a delay such as 100us or 2ms"
    in_range "$mtu" 576 65000 || bad "up: -m $mtu: want 576..65000"
    [ -n "$name" ] || name="$NS_PREFIX$$"
    need_root
    [ -z "$(cluster_ns "$name")" ] ||
        die "up: a cluster named $name exists (perf/cluster.sh down -n $name)"
    UP_NAME=$name
    trap up_abort EXIT
    trap 'exit 1' INT TERM HUP
    err=$(mktemp "${TMPDIR:-/tmp}/rlcl-up.XXXXXX")
    sw="$name-sw"
    ip netns add "$sw" 2>"$err" || die "up: cannot create a network namespace: $(head -c 300 "$err")"
    no_ipv6 "$sw"
    { ip -n "$sw" link add "$BR" type bridge && ip -n "$sw" link set "$BR" up; } 2>"$err" ||
        die "up: cannot create a bridge: $(head -c 300 "$err")"
    for i in $(seq 0 $((hosts - 1))); do
        ns="$name-h$i"
        ip netns add "$ns" 2>"$err" || die "up: cannot create namespace $ns: $(head -c 300 "$err")"
        no_ipv6 "$ns"
        ip -n "$sw" link add "h$i" mtu "$mtu" type veth peer name "$IF_HOST" mtu "$mtu" netns "$ns" 2>"$err" ||
            die "up: cannot create a veth pair: $(head -c 300 "$err")"
        { ip -n "$ns" addr add "$SUBNET.$((i + 1))/24" dev "$IF_HOST" &&
            ip -n "$ns" link set lo up && ip -n "$ns" link set "$IF_HOST" up &&
            ip -n "$sw" link set "h$i" master "$BR" && ip -n "$sw" link set "h$i" up; } 2>"$err" ||
            die "up: cannot set up host $i's link: $(head -c 300 "$err")"
    done
    local lost="" note
    if [ -n "$delay" ]; then
        if tc -n "$name-h0" qdisc add dev "$IF_HOST" root netem delay 1ms 2>/dev/null; then
            tc -n "$name-h0" qdisc del dev "$IF_HOST" root
        else
            echo "cluster.sh: this kernel has no sch_netem: -d $delay is NOT applied; the links have the rate limit only" >&2
            lost=$delay
            delay=
        fi
    fi
    for i in $(seq 0 $((hosts - 1))); do
        { set_link "$name-h$i" "$IF_HOST" "$bits" "$delay" && set_link "$sw" "h$i" "$bits" "$delay"; } 2>"$err" ||
            die "up: tc on host $i's link failed (rate $rate${delay:+, delay $delay}): $(head -c 300 "$err")"
    done
    rm -f "$err"
    trap - EXIT INT TERM HUP
    if [ "$bits" = 0 ]; then note="no rate limit"; else note="rate $rate ($bits bit/s, tbf on both directions)"; fi
    if [ -n "$delay" ]; then
        note="$note, delay $delay per link (netem; host to host: 2 x $delay one way)"
    elif [ -n "$lost" ]; then
        note="$note, NO delay (-d $lost asked, but the kernel has no sch_netem)"
    else
        note="$note, no delay"
    fi
    echo "cluster $name: $hosts hosts $name-h0..h$((hosts - 1)) ($SUBNET.1-$SUBNET.$hosts on $IF_HOST, MTU $mtu)," \
        "switch $sw; $note"
}

# ------------------------------------------------------------------------------------------ show
cmd_show() {
    local name="" o ns
    OPTIND=1
    while getopts n:h o; do
        case $o in
        n) name=$(norm_name "$OPTARG") || exit 2 ;;
        *) usage ;;
        esac
    done
    need_root
    [ -n "$(cluster_ns "$name")" ] || die "show: no cluster${name:+ named $name}"
    for ns in $(cluster_ns "$name"); do
        echo "== $ns"
        ip -n "$ns" -br addr show 2>/dev/null | grep -v '^lo '
        # the qdiscs other than noqueue, each with its counters
        tc -s -n "$ns" qdisc show 2>/dev/null | awk '/^qdisc/ { show = ($2 != "noqueue") } show && NF { print "   " $0 }'
    done
}

# ------------------------------------------------------------------------------------------- run
RUN_PIDS=() RUN_AUX=() RUN_TMP="" RUN_ID="" RUN_NAME=""
# state of a process: R, S, T, Z, ... or "gone"
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
# processes of this run still in the cluster's namespaces (the ranks and whatever they started)
run_leftovers() {
    local ns p
    for ns in $(cluster_ns "$RUN_NAME"); do
        for p in $(ip netns pids "$ns" 2>/dev/null); do
            tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RLCL_RUN=$RUN_ID" && echo "$p"
        done
    done
}
# SIGTERM to what is left of this run, SIGKILL 3 s later
run_stop() {
    local p left until
    left="$(run_leftovers) ${RUN_PIDS[*]}"
    for p in $left; do kill -TERM "$p" 2>/dev/null; done
    until=$(($(now_ms) + 3000))
    while :; do
        left=$(for p in $(run_leftovers) "${RUN_PIDS[@]}"; do alive "$p" && echo "$p"; done)
        [ -z "$left" ] && break
        if [ "$(now_ms)" -ge $until ]; then
            for p in $left; do kill -KILL "$p" 2>/dev/null; done
            break
        fi
        sleep 0.05
    done
}
# shellcheck disable=SC2317  # called by the trap
run_cleanup() {
    local p
    [ -n "$RUN_ID" ] && [ ${#RUN_PIDS[@]} -gt 0 ] && run_stop
    # the prefixers end when the last writer of their fifo is gone; give them a moment
    local until=$(($(now_ms) + 3000))
    for p in "${RUN_AUX[@]}"; do
        while alive "$p" && [ "$(now_ms)" -lt $until ]; do sleep 0.02; done
        kill -KILL "$p" 2>/dev/null
    done
    [ -n "$RUN_TMP" ] && rm -rf "$RUN_TMP"
}

cmd_run() {
    local name="" hosts="" per="" tmo=300 grace=10 port="" o
    OPTIND=1
    while getopts n:H:p:t:g:P:h o; do
        case $o in
        n) name=$(norm_name "$OPTARG") || exit 2 ;;
        H) hosts=$OPTARG ;;
        p) per=$OPTARG ;;
        t) tmo=$OPTARG ;;
        g) grace=$OPTARG ;;
        P) port=$OPTARG ;;
        *) usage ;;
        esac
    done
    shift $((OPTIND - 1))
    [ "${1:-}" = -- ] && shift
    [ $# -ge 1 ] || bad "run: no program (perf/cluster.sh run -n name -p ranks-per-host -- prog args...)"
    [ -n "$name" ] || bad "run: -n name is required"
    in_range "$per" 1 256 || bad "run: -p ranks-per-host (1..256) is required"
    in_range "$tmo" 1 1000000 || bad "run: -t $tmo: want whole seconds >= 1"
    [[ "$grace" =~ ^[0-9]+$ ]] || bad "run: -g $grace: want whole seconds"
    [ -z "$port" ] || { [[ "$port" =~ ^[0-9]+$ ]] && [ "$port" -ge 1 ] && [ "$port" -le 65535 ]; } ||
        bad "run: -P $port: want a port"
    need_root
    local have
    have=$(cluster_hosts "$name")
    [ "$have" -ge 1 ] || die "run: no cluster named $name (perf/cluster.sh up ...)"
    [ -n "$hosts" ] || hosts=$have
    in_range "$hosts" 1 "$have" ||
        bad "run: -H $hosts: cluster $name has $have hosts"
    [ -n "$port" ] || port=$((20000 + RANDOM % 12000))
    local secret=${RINGLET_SECRET:-}
    [ -n "$secret" ] || secret=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
    local world=$((hosts * per)) i l r
    RUN_NAME=$name
    RUN_ID="$name.$$.$RANDOM$RANDOM"
    RUN_TMP=$(mktemp -d "${TMPDIR:-/tmp}/rlcl-run.XXXXXX") || die "run: mktemp failed"
    trap run_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
    for i in $(seq 0 $((hosts - 1))); do
        for l in $(seq 0 $((per - 1))); do
            r=$((i * per + l))
            mkfifo "$RUN_TMP/o$r" "$RUN_TMP/e$r" || die "run: mkfifo failed"
            sed -u "s/^/[$r] /" <"$RUN_TMP/o$r" &
            RUN_AUX+=($!)
            sed -u "s/^/[$r] /" <"$RUN_TMP/e$r" >&2 &
            RUN_AUX+=($!)
            ip netns exec "$name-h$i" env RLCL_RUN="$RUN_ID" RANK="$r" WORLD_SIZE="$world" LOCAL_RANK="$l" \
                LOCAL_WORLD_SIZE="$per" GROUP_RANK="$i" GROUP_WORLD_SIZE="$hosts" ROLE_RANK=$r \
                ROLE_WORLD_SIZE=$world MASTER_ADDR="$SUBNET.1" MASTER_PORT="$port" RINGLET_SECRET="$secret" \
                RINGLET_HOSTID="$name-h$i" RINGLET_SOCKET_IFNAME="=$IF_HOST" \
                "$@" </dev/null >"$RUN_TMP/o$r" 2>"$RUN_TMP/e$r" &
            RUN_PIDS[r]=$!
        done
    done
    # wait: every rank, at most tmo seconds; after the first failure, grace seconds more
    local deadline=$(($(now_ms) + tmo * 1000)) status=() first="" why="" p rc n_left
    while :; do
        n_left=0
        for r in $(seq 0 $((world - 1))); do
            [ -n "${status[r]:-}" ] && continue
            p=${RUN_PIDS[r]}
            if alive "$p"; then
                n_left=$((n_left + 1))
                continue
            fi
            wait "$p"
            rc=$?
            status[r]=$rc
            if [ "$rc" != 0 ] && [ -z "$first" ]; then
                first=$r
                [ $((deadline - $(now_ms))) -gt $((grace * 1000)) ] && deadline=$(($(now_ms) + grace * 1000))
            fi
        done
        [ $n_left = 0 ] && break
        if [ "$(now_ms)" -ge $deadline ]; then
            if [ -n "$first" ]; then
                why="rank $first failed (exit ${status[first]}); the others had $grace s (-g) to end"
            else
                why="deadline of $tmo s (-t) reached"
            fi
            break
        fi
        sleep 0.1
    done
    local killed=""
    if [ -n "$why" ]; then
        for r in $(seq 0 $((world - 1))); do [ -z "${status[r]:-}" ] && killed="$killed $r"; done
        echo "cluster.sh: $why: stopping ranks$killed" >&2
        run_stop
        for r in $killed; do
            wait "${RUN_PIDS[r]}"
            status[r]=$?
        done
    fi
    # processes the ranks started and left behind
    local extra
    extra=$(run_leftovers | tr '\n' ' ')
    if [ -n "$extra" ]; then
        echo "cluster.sh: killing processes the ranks left behind: $extra" >&2
        run_stop
    fi
    RUN_PIDS=()
    run_cleanup
    RUN_AUX=() RUN_TMP=
    trap - EXIT INT TERM HUP
    local bad_ranks=""
    for r in $(seq 0 $((world - 1))); do [ "${status[r]}" != 0 ] && bad_ranks="$bad_ranks $r(${status[r]})"; done
    if [ -z "$first" ] && [ -z "$why" ] && [ -z "$bad_ranks" ]; then
        return 0
    fi
    echo "cluster.sh: failed ranks (exit status):$bad_ranks" >&2
    if [ -n "$first" ]; then
        return "${status[first]}"
    fi
    return 124
}

# ----------------------------------------------------------------------------------------- bench
BENCH_NAME=
# shellcheck disable=SC2317  # called by the trap
bench_abort() {
    [ -n "$BENCH_NAME" ] && down_cluster "$BENCH_NAME"
}

cmd_bench() {
    local rate=1gbit delay="" size=256M hlist="2 4" per=2 iters=5 warm=1 mtu=1500 tmo=600 o
    OPTIND=1
    while getopts r:d:s:H:p:i:w:m:t:h o; do
        case $o in
        r) rate=$OPTARG ;;
        d) delay=$OPTARG ;;
        s) size=$OPTARG ;;
        H) hlist=$OPTARG ;;
        p) per=$OPTARG ;;
        i) iters=$OPTARG ;;
        w) warm=$OPTARG ;;
        m) mtu=$OPTARG ;;
        t) tmo=$OPTARG ;;
        *) usage ;;
        esac
    done
    local bits bytes h maxh=0
    bits=$(rate_bits "$rate") || bits=0
    [ "$bits" != 0 ] || bad "bench: -r $rate: want a rate such as 1gbit"
    bytes=$(size_bytes "$size") || bad "bench: -s $size: want bytes with K, M or G"
    for h in $hlist; do
        in_range "$h" 2 250 || bad "bench: -H \"$hlist\": want host counts >= 2"
        [ "$h" -gt "$maxh" ] && maxh=$h
    done
    [ "$maxh" -ge 2 ] || bad "bench: -H: no host count"
    need_root
    local perfbin="${BUILD:-$ROOT/build}/bin/ringlet-perf"
    [ -x "$perfbin" ] || die "bench: $perfbin not found (make first, or set BUILD)"
    BENCH_NAME="${NS_PREFIX}b$$"
    trap bench_abort EXIT
    trap 'exit 1' INT TERM HUP
    "$SELF" up -H "$maxh" -r "$rate" ${delay:+-d "$delay"} -m "$mtu" -n "$BENCH_NAME" || die "bench: up failed"
    local out rows=() line p t_oop t_ip b_oop b_ip bound ceil
    out=$(mktemp "${TMPDIR:-/tmp}/rlcl-bench.XXXXXX")
    # R in GB/s (1e9 bytes/s, ringlet-perf's unit) and the TCP/IP payload ceiling
    bound=$(awk -v b="$bits" 'BEGIN { printf "%.4f", b / 8 / 1e9 }')
    ceil=$(awk -v b="$bits" -v m="$mtu" 'BEGIN { printf "%.4f", b / 8 / 1e9 * (m - 52) / (m + 14) }')
    for h in $hlist; do
        p=$((h * per))
        echo "---- H=$h hosts x L=$per ranks (P=$p): ringlet-perf allreduce -b $size -e $size -n $iters -w $warm"
        "$SELF" run -n "$BENCH_NAME" -H "$h" -p "$per" -t "$tmo" -- "$perfbin" allreduce -b "$bytes" -e "$bytes" \
            -n "$iters" -w "$warm" -c 1 -M host 2>&1 | tee "$out"
        if [ "${PIPESTATUS[0]}" != 0 ]; then
            rows+=("$(printf '%-3s %-3s %-4s %12s  %s' "$h" "$per" "$p" "$bytes" "ringlet-perf failed")")
            continue
        fi
        # [0]  size count type redop root  time algbw busbw #wrong  time algbw busbw #wrong
        line=$(grep -E "^\[0\] +$bytes +[0-9]+ " "$out" | head -n 1)
        read -r _ _ _ _ _ _ t_oop _ _ _ t_ip _ _ _ <<<"$line"
        b_oop=$(awk -v s="$bytes" -v p=$p -v t="${t_oop:-0}" 'BEGIN { if (t > 0) printf "%.4f", s / (t * 1e-6) * 2 * (p - 1) / p / 1e9; else print "?" }')
        b_ip=$(awk -v s="$bytes" -v p=$p -v t="${t_ip:-0}" 'BEGIN { if (t > 0) printf "%.4f", s / (t * 1e-6) * 2 * (p - 1) / p / 1e9; else print "?" }')
        rows+=("$(awk -v h="$h" -v l="$per" -v p=$p -v s="$bytes" -v a="$b_oop" -v b="$b_ip" -v r="$bound" -v c="$ceil" 'BEGIN {
            printf "%-3s %-3s %-4s %12s  %10s %10s  %8s %8s  %6.1f%% %6.1f%%", h, l, p, s, a, b, r, c, 100 * a / r, 100 * b / r }')")
    done
    rm -f "$out"
    "$SELF" down -n "$BENCH_NAME"
    BENCH_NAME=
    trap - EXIT INT TERM HUP
    echo
    echo "allreduce float sum, host buffers; link rate $rate on every host link (both directions)${delay:+, delay $delay per link (if netem)}"
    echo "bound: busbw <= R (the ring crosses each host link once per direction); ceiling: R x (MTU-52)/(MTU+14), TCP/IP payload"
    echo "busbw in GB/s (1e9 B/s), from the time column: S / t x 2(P-1)/P"
    printf '%-3s %-3s %-4s %12s  %10s %10s  %8s %8s  %7s %7s\n' H L P bytes "busbw oop" "busbw ip" "bound R" ceiling \
        "oop/R" "ip/R"
    printf '%s\n' "${rows[@]}"
}

# ------------------------------------------------------------------------------------------- rsh
cmd_rsh() {
    local host=${1:-}
    [ $# -ge 2 ] || bad "rsh: usage: perf/cluster.sh rsh host command..."
    shift
    [[ "$host" =~ ^${NS_PREFIX}[A-Za-z0-9_]*-h[0-9]+$ ]] || bad "rsh: $host is not a cluster host (<name>-h<i>)"
    need_root
    [ -e "/run/netns/$host" ] || die "rsh: no host $host (perf/cluster.sh up ...)"
    command -v unshare >/dev/null 2>&1 || die "rsh: no 'unshare' command (install util-linux)"
    # shellcheck disable=SC2016  # expanded by the inner sh
    exec ip netns exec "$host" unshare --uts sh -c 'hostname "$1" || exit 1; eval "$2"' rsh "$host" "$*"
}

case "${1:-}" in
up | down | run | show | bench | rsh)
    cmd=$1
    shift
    "cmd_$cmd" "$@"
    ;;
-h | --help | help) usage ;;
*) usage ;;
esac

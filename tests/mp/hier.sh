#!/usr/bin/env bash
# The hierarchical all-reduce (src/algo/hier.c; issue 16): reduce-scatter inside each host, an
# all-reduce of each local shard across hosts, all-gather inside each host.
#
# Hosts are simulated on loopback by RINGLET_HOSTID (set per rank from RANK: ranks of one
# "host" are consecutive), so ranks of one host talk over shm and ranks of different hosts
# over TCP, as on a cluster (tests/mp/cluster.sh runs the real thing in network namespaces;
# here no root is needed). For each shape H x L (2x2, 2x3, 3x2) and each memory (host, and
# device buffers on the simulated GPU with jitter), tests/mp/collectives --colls allreduce
# --quick (every dtype, two ops each and every op on four dtypes, counts 0, 1, P-1, P+1 and
# a large one, in place and not, blocking and not; integers bit-exact, floats within the
# stated bound) with RINGLET_ALGO=hier, small chunks and slices (RINGLET_CHUNK_SIZE=16384,
# RINGLET_HIER_SLICE_BYTES=65536: the large count runs as many overlapped rounds) and
# RINGLET_DEBUG=INFO. Asserted from the log: every rank sends over TCP to the rank of its
# own local position on the next host, an edge the flat ring never has (for local position
# 0 the flat ring sends to a rank of its own host), so the hierarchy ran.
# Also: a 2+4 job (hosts of different sizes) with RINGLET_ALGO=hier falls back to the ring
# on every rank and is still right (the ranks of the 2-rank host see P a multiple of their
# host's count: they must still tell that the job has not the shape); RINGLET_ALGO=auto at 2x2 (with RINGLET_HIER_MIN_BYTES=65536, so that the
# sanitizers' smaller large counts qualify) measures both algorithms for the large counts
# and every rank logs the same times and the same choice; a bad RINGLET_ALGO fails
# init naming the accepted values.
# Sanitizer builds use smaller large counts. About a minute on 2 cores.
# Exit 0 = all passed, 1 = a failure.
set -u

BUILD=${BUILD:-build}
RUN="$BUILD/bin/ringlet-run"
PROG="$BUILD/tests/mp/collectives"
for f in "$RUN" "$PROG"; do
    if [ ! -x "$f" ]; then
        echo "FAIL: $f not found (build first, or set BUILD)"
        exit 1
    fi
done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-hier.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export RINGLET_TIMEOUT=${RINGLET_TIMEOUT:-120}

case "${SANITIZE:-}" in
"") LARGE=1000003 DLARGE=100003 ;;
*thread*) LARGE=30011 DLARGE=8191 ;;
*) LARGE=262147 DLARGE=30011 ;;
esac

fails=0
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

# run NAME NRANKS HOSTEXPR "VAR=value ..." ARGS... : ranks with RINGLET_HOSTID=h$((HOSTEXPR))
# and the variables, log in $TMP/NAME.log
run() {
    local name=$1 n=$2 hexpr=$3 vars=$4
    shift 4
    # shellcheck disable=SC2086
    if ! env $vars timeout 600 "$RUN" -n "$n" --timeout 500 -- sh -c "RINGLET_HOSTID=h\$(($hexpr)) exec \"\$0\" \"\$@\"" \
        "$PROG" "$@" >"$TMP/$name.log" 2>&1; then
        fail "$name: the run failed; its last lines:"
        tail -n 15 "$TMP/$name.log"
        return 1
    fi
    local ok
    ok=$(grep -cE "[1-9][0-9]* cases checked, 0 failed" "$TMP/$name.log")
    if [ "$ok" != "$n" ]; then
        fail "$name: $ok of $n ranks report all cases right"
        grep -E "FAIL|wrong|error" "$TMP/$name.log" | head -n 10
        return 1
    fi
    return 0
}

for shape in 2x2 2x3 3x2; do
    H=${shape%x*} L=${shape#*x}
    P=$((H * L))
    for memory in host device; do
        name="hier-$shape-$memory"
        count=$LARGE
        vars="RINGLET_ALGO=hier RINGLET_CHUNK_SIZE=16384 RINGLET_HIER_SLICE_BYTES=65536 RINGLET_DEBUG=INFO"
        if [ "$memory" = device ]; then
            count=$DLARGE
            vars="$vars RINGLET_DEVICE=sim RINGLET_SIM_JITTER=20"
        fi
        if run "$name" $P "RANK/$L" "$vars" --colls allreduce --quick --max-count $count --memory $memory; then
            # every rank sends over TCP to its own local position on the next host
            bad=0
            for ((r = 0; r < P; r++)); do
                h=$((r / L)) l=$((r % L))
                to=$((((h + 1) % H) * L + l))
                if ! grep -q "^\[$r\] .*sending to rank $to over tcp" "$TMP/$name.log"; then
                    fail "$name: rank $r never sent to rank $to (local position $l on the next host) over tcp: the hierarchy did not run"
                    bad=1
                fi
            done
            [ $bad = 0 ] && echo "ok: $name: $P ranks right, inter-host edges between equal local positions"
        fi
    done
done

# Hosts of different sizes: RINGLET_ALGO=hier takes the ring.
if run uneven 6 "RANK<2?0:1" "RINGLET_ALGO=hier RINGLET_CHUNK_SIZE=16384" --colls allreduce --quick --max-count $LARGE; then
    echo "ok: uneven 2+4 hosts: right (the ring)"
fi

# auto: the large count is measured both ways; every rank logs the same choice.
if run auto 4 "RANK/2" "RINGLET_DEBUG=INFO RINGLET_HIER_MIN_BYTES=65536" --colls allreduce --quick --max-count $LARGE; then
    grep "hierarchical .* (slowest rank)" "$TMP/auto.log" | sed 's/^\[[0-9]*\] ringlet\[rank [0-9]* pid [0-9]*\] INFO: //' |
        sort | uniq -c >"$TMP/auto.choices"
    nchoice=$(wc -l <"$TMP/auto.choices")
    if [ "$nchoice" -lt 1 ]; then
        fail "auto: no rank logged a measured choice"
    elif awk '$1 != 4 { bad = 1 } END { exit !bad }' "$TMP/auto.choices"; then
        fail "auto: the ranks logged different choices:"
        cat "$TMP/auto.choices"
    else
        echo "ok: auto: every rank made the same measured choice:"
        sed 's/^ *4 /    /' "$TMP/auto.choices"
    fi
fi

# A bad value names the accepted ones.
if RINGLET_ALGO=tree timeout 60 "$RUN" -n 2 --timeout 50 -- "$PROG" --quick >"$TMP/bad.log" 2>&1; then
    fail "RINGLET_ALGO=tree was accepted"
elif grep -q "RINGLET_ALGO=tree: must be auto, ring, oneshot, hier, halving, doubling or star" "$TMP/bad.log"; then
    echo "ok: RINGLET_ALGO=tree refused with the accepted values"
else
    fail "RINGLET_ALGO=tree: no clear message:"
    tail -n 5 "$TMP/bad.log"
fi

if [ "$fails" -gt 0 ]; then
    echo "hier: $fails failure(s)"
    exit 1
fi
echo "hier: all passed"
exit 0

#!/usr/bin/env bash
# Argument errors of the public API (tests/mp/args.c):
#   1. "args init" as one plain process, without the launcher: ringlet_strerror,
#      ringlet_datatype_size, init errors (NULL comm pointer, nranks, rank, garbage unique
#      ids, broken launcher environments, ringlet_comm_init_rank_config's bad settings and
#      its own deadline: 1 s against RINGLET_TIMEOUT=10), a 1-rank communicator afterwards.
#   2. "args p2" under ringlet-run -n 2: every argument error of every call on a live
#      communicator, blocking and non-blocking, then a real all-reduce on it, then abort;
#      2b. the same with RINGLET_DEVICE=sim, which adds misaligned device buffers.
#   3. every RINGLET_* variable of the README's tables has a bad-value case in 1.
#   4. WORLD_SIZE=3 on one rank of 2 (rank 1, then rank 0): both ranks' inits fail naming
#      the mismatch.
#   5. RINGLET_ALGO, then RINGLET_HALVING_MAX_BYTES, set on one rank of 3: every rank's init
#      fails naming the setting.
# Both ranks run the same sequence; argument errors must be local (no peer traffic).
# Exit 0 = all passed, 1 = a failure. Takes a few seconds.
set -u

BUILD=${BUILD:-build}
RUN="$BUILD/bin/ringlet-run"
PROG="$BUILD/tests/mp/args"
for f in "$RUN" "$PROG"; do
    if [ ! -x "$f" ]; then
        echo "FAIL: $f not found (build first, or set BUILD)"
        exit 1
    fi
done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-args.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0

# 1. no launcher: a clean environment without any launcher's variables
env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT \
    -u SLURM_PROCID -u SLURM_NTASKS -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE \
    RINGLET_TIMEOUT=10 timeout 120 "$PROG" init >"$TMP/init.out" 2>&1
rc=$?
if [ $rc = 0 ] && grep -qE '^args init: rank 0: [1-9][0-9]* checks, 0 failed$' "$TMP/init.out"; then
    echo "ok:   $(grep -E '^args init:' "$TMP/init.out")"
else
    echo "FAIL: args init: exit status $rc"
    tail -n 60 "$TMP/init.out"
    fails=$((fails + 1))
fi

# 2. two ranks through the launcher
mkdir -p "$TMP/sync" "$TMP/sync-dev" # ranks_meet's files (args.c)
ARGS_SYNC=$TMP/sync RINGLET_TIMEOUT=20 "$RUN" -n 2 --timeout 120 "$PROG" p2 >"$TMP/p2.out" 2>&1
rc=$?
n=$(grep -cE '^\[[01]\] args p2: rank [01]: [1-9][0-9]* checks, 0 failed$' "$TMP/p2.out")
if [ $rc = 0 ] && [ "$n" = 2 ]; then
    grep -E '^\[[01]\] args p2:' "$TMP/p2.out" | sed 's/^/ok:   /'
else
    echo "FAIL: args p2: launcher exit status $rc, $n of 2 ranks passed"
    tail -n 80 "$TMP/p2.out"
    fails=$((fails + 1))
fi

# 2b. the same over the simulated GPU: also misaligned device buffers, refused before a kernel
#     sees them (a GPU's misaligned load is a sticky fault), then a device all-reduce
ARGS_SYNC=$TMP/sync-dev RINGLET_DEVICE=sim RINGLET_TIMEOUT=20 "$RUN" -n 2 --timeout 120 "$PROG" p2 >"$TMP/p2dev.out" 2>&1
rc=$?
n=$(grep -cE '^\[[01]\] args p2: rank [01]: [1-9][0-9]* checks, 0 failed$' "$TMP/p2dev.out")
d=$(grep -cE '^\[[01]\] args p2: rank [01]: device checks done$' "$TMP/p2dev.out")
if [ $rc = 0 ] && [ "$n" = 2 ] && [ "$d" = 2 ]; then
    grep -E '^\[[01]\] args p2: rank [01]: [0-9]+ checks' "$TMP/p2dev.out" | sed 's/^/ok:   (simulated GPU) /'
else
    echo "FAIL: args p2 on the simulated GPU: launcher exit status $rc, $n of 2 ranks passed, $d did the device checks"
    tail -n 80 "$TMP/p2dev.out"
    fails=$((fails + 1))
fi

# 3. every RINGLET_* variable of the README's tables has a bad-value case in args.c
#    (env_bad, checked above: init fails naming it, its value and what is allowed) or is
#    taken as it is (env_free)
missing=""
for v in $(grep -E '^\| `RINGLET_' README.md | cut -d'|' -f2 | grep -oE 'RINGLET_[A-Z0-9_]+' | sort -u); do
    grep -q "\"$v\"" tests/mp/args.c || missing="$missing $v"
done
if [ -z "$missing" ]; then
    echo "ok:   every RINGLET_* variable of the README has a bad-value case: $(grep -cE '^\| `RINGLET_' README.md) table rows"
    grep -E '^args init: (RINGLET_CHECK|RINGLET_CHUNK_SIZE|RINGLET_TRANSPORT)=' "$TMP/init.out" | sed 's/^/      /'
else
    echo "FAIL: README variables without a case in tests/mp/args.c:$missing"
    fails=$((fails + 1))
fi

# 3b. RINGLET_DEBUG: the words init allows (its message for a bad value, from envcheck.c),
#     the README's row and the log's own warning (log.c, for a log before any init) agree
words() { grep -oE '[A-Za-z0-9]+' <<<"$1" | grep -vx 'or' | tr 'a-z' 'A-Z' | sort | paste -sd' '; }
init_w=$(words "$(sed -n 's/^args init: RINGLET_DEBUG=loud -> .*: must be //p' "$TMP/init.out")")
readme_w=$(words "$(grep -E '^\| `RINGLET_DEBUG`' README.md | cut -d'|' -f4 | sed 's/ to stderr.*//' | grep -oE '`[A-Za-z0-9]+`')")
log_w=$(words "$(grep -o 'not understood ([^)]*)' src/base/log.c | sed 's/^[^(]*(//; s/)$//')")
if [ -n "$init_w" ] && [ "$init_w" = "$readme_w" ] && [ "$init_w" = "$log_w" ]; then
    echo "ok:   RINGLET_DEBUG's values agree (init, README, log): $init_w"
else
    echo "FAIL: RINGLET_DEBUG's values differ: init '$init_w', README '$readme_w', log.c '$log_w'"
    fails=$((fails + 1))
fi

# 4. WORLD_SIZE different on one rank: every rank's init fails saying so (rank 1's used
#    to be "no table from rank 0 (connection closed by peer): ... RINGLET_SECRET ...")
for who in 1 0; do
    RINGLET_TIMEOUT=20 "$RUN" -n 2 --timeout 120 --grace 30 sh -c \
        '[ "$RANK" = '$who' ] && export WORLD_SIZE=3; exec "$0" p2' "$PROG" >"$TMP/ws.out" 2>&1
    [ $who = 1 ] && said="says the job has 3 ranks, rank 0 says 2" || said="says the job has 2 ranks, rank 0 says 3"
    n=$(grep -c "$said" "$TMP/ws.out")
    if [ "$n" = 2 ]; then
        echo "ok:   WORLD_SIZE=3 on rank $who only (2 on the other): both ranks say so"
        grep -m2 "says the job" "$TMP/ws.out" | sed 's/^/      /'
    else
        echo "FAIL: WORLD_SIZE=3 on rank $who only: $n of 2 ranks name the mismatch"
        tail -n 10 "$TMP/ws.out"
        fails=$((fails + 1))
    fi
done

# 5. An algorithm setting on one rank only (RINGLET_ALGO, a threshold): every rank's init
#    fails naming it (it used to hang in the first collective the ranks cut differently,
#    until the deadline, RINGLET_CHECK's own exchange included)
for setting in RINGLET_ALGO=ring RINGLET_HALVING_MAX_BYTES=8192; do
    RINGLET_TIMEOUT=20 "$RUN" -n 3 --timeout 120 --grace 30 sh -c \
        '[ "$RANK" = 2 ] && export '"$setting"'; exec "$0" p2' "$PROG" >"$TMP/tune.out" 2>&1
    n=$(grep -c "${setting%%=*} is .* on rank .* but .* on rank .*: it decides which algorithm" "$TMP/tune.out")
    if [ "$n" = 3 ]; then
        echo "ok:   $setting on rank 2 only: every rank's init says so"
        grep -m1 "it decides which algorithm" "$TMP/tune.out" | sed 's/^/      /'
    else
        echo "FAIL: $setting on rank 2 only: $n of 3 ranks name it"
        tail -n 10 "$TMP/tune.out"
        fails=$((fails + 1))
    fi
done

if [ $fails = 0 ]; then
    echo "args: all passed"
    exit 0
fi
echo "args: $fails failed"
exit 1

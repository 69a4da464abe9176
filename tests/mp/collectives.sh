#!/usr/bin/env bash
# Correctness of every collective (tests/mp/collectives.c) at P = 1, 2, 3, 4, 5, 8, launched
# one after another through ringlet-run, once per transport in RINGLET_TEST_TRANSPORTS
# (default "shm tcp": shared memory, the default on one host, and TCP; each run gets
# RINGLET_TRANSPORT set to it).
#
# What runs where (normal build; L = the large count, 1000003 elements):
#   every P: allreduce, broadcast, reduce, allgather, reduce_scatter, send/recv ring (P >= 2),
#            barrier x all 10 dtypes x all 5 ops (reducing collectives) at counts 0, 1, P-1, P+1,
#            each in place and out of place, blocking and non-blocking, roots 0, P/2, P-1.
#   count L: P = 2: every variant above (--large full).
#            P = 1, 3, 4, 5, 8: every collective x dtype x op once, the variant (in place or
#            not, blocking or not, root) rotating from one combination to the next; P = 4 runs
#            twice (--phase 0 and 1), so there every combination runs both in place and out of
#            place. P = 8 takes L = 262147 (still many chunks; eight ranks on two cores took
#            40 s per transport at 1000003).
#   (allgather / reduce_scatter: L is the per-rank block, the buffers hold P * L elements.)
# Library knobs varied on the way (ignored by a library that lacks them): P = 3 with
# RINGLET_CHECK=1 and RINGLET_CHUNK_SIZE=16384, RINGLET_NCHUNKS_INFLIGHT=2 (many chunks and
# slot reuse per segment) and RINGLET_ALGO=ring (the ring even for the small counts, which
# otherwise take the one-shot path), plus small shared-memory slots (a message spans many);
# RINGLET_ALGO=halving (recursive halving and doubling all-reduce) at P = 1..5 (3 and 5:
# positions that pair up first), floating-point results checked identical on every rank;
# RINGLET_ALGO=doubling (recursive doubling all-reduce) at P = 1..5 (3 and 5: positions that
# pair up first; 16 KiB chunks at 3, so that a step spans several), floats identical on
# every rank too, and at P = 3 on device buffers; RINGLET_ALGO=star (the all-reduce through
# rank 0, host buffers) at P = 1..5, floats identical on every rank, and at P = 3 on device
# buffers (which it leaves to the one-shot path and the ring);
# P = 5 with RINGLET_NSOCKS_PERPEER=3 and RINGLET_ALGO=oneshot (the one-shot path at the
# large count too); P = 4 --phase 1 with RINGLET_BOARD_BYTES=40 (over shared memory, a
# one-shot call through the board up to 40 bytes, messages above: both in one communicator;
# every other shared-memory run takes the board up to its 16 KiB); sanitizer runs with RINGLET_CHUNK_SIZE=8192 so that their smaller L
# still spans many chunks. On device buffers, P = 2 with a chunk size that is no multiple
# of 8 (1048580: over shm and tcp the staging slots stay aligned, as it is rounded down).
# Reduction threads (POOLPLAN below), over tcp when it is in TRANSPORTS: the reducing
# collectives with RINGLET_REDUCE_THREADS=3 (forced: more threads than a 2-core machine has),
# P = 2 at the default chunks, P = 3 with 64 KiB chunks and RINGLET_REDUCE_MIN_BYTES=4096 (every
# chunk split three ways at odd offsets); sanitizer builds with their small chunks and
# RINGLET_REDUCE_MIN_BYTES=1024.
# Integers are checked bit-exact, floats within the bound stated at the top of
# collectives.c, min/max exactly; nothing outside a result may be written.
# Sanitizer builds (SANITIZE set, as `make test SANITIZE=...` does): L = 262147, every P
# rotating; thread sanitizer: L = 65537 and --quick (two ops per dtype at the reducing
# collectives). What the sanitizers would only see again runs over one transport there
# (a row "tr:P" runs over tr alone): P = 8 over shm; on device buffers, P = 1, 4 and 5
# over cuda_ipc (shm and tcp stage device buffers the same way at P = 2 and 3); host and
# device buffers in one call (MIXPLAN) over tcp. RINGLET_COLLECTIVES_ARGS is appended to every run's arguments (e.g.
# "--max-count 1000" for a fast check).
# Device memory (--memory device, DPLAN below): the same grid on device buffers, through the
# device layer's backend RINGLET_TEST_DEVICE (default sim, the simulated GPU; cuda on a GPU;
# "none" leaves them out), stream-ordered, over each transport: P = 1, 2, 3 (the ring with
# small chunks, two slots, RINGLET_SIM_JITTER so that a missing stream wait shows; on the
# simulator with streams held, RINGLET_STREAM_HOLD=memop), 4 (the
# kernels reduce from device copies of the slots), 5 (the one-shot path at every count), with smaller large counts (the simulator copies every chunk
# through pinned slots on 2 cores). RINGLET_TEST_MEMORY ("host device" by default) chooses
# which halves run, RINGLET_TEST_DEVICE_TRANSPORTS ("ipc" and TRANSPORTS by default) the
# transports of the device half.
# Takes about 4 minutes on a 2-core machine (normal -O2 build).
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
source "$(dirname "$0")/lib/scratch.bash"
scratch_dir collectives

TRANSPORTS=${RINGLET_TEST_TRANSPORTS:-shm tcp}
SAN=${SANITIZE:-}
EXTRA=${RINGLET_COLLECTIVES_ARGS:-}
SEED=${RINGLET_TEST_SEED:-20240613}
# a hang shows up as an error of the library well before the launcher's --timeout
export RINGLET_TIMEOUT=${RINGLET_TIMEOUT:-120}

# P and arguments of each run
# P|environment|arguments of each run
if [ -z "$SAN" ]; then
    PLAN="1||
2||--large full
3|RINGLET_CHECK=1 RINGLET_CHUNK_SIZE=16384 RINGLET_NCHUNKS_INFLIGHT=2 RINGLET_ALGO=ring RINGLET_SHM_SLOT_SIZE=4096 RINGLET_SHM_NSLOTS=3|
4||--phase 0
4|RINGLET_BOARD_BYTES=40|--phase 1
5|RINGLET_NSOCKS_PERPEER=3 RINGLET_ALGO=oneshot|
8||--max-count 262147
1|RINGLET_ALGO=halving|--colls allreduce --max-count 1009
2|RINGLET_ALGO=halving|--colls allreduce --max-count 30011
3|RINGLET_ALGO=halving|--colls allreduce --max-count 100003
4|RINGLET_ALGO=halving|--colls allreduce --max-count 100003
5|RINGLET_ALGO=halving RINGLET_CHUNK_SIZE=16384|--colls allreduce --max-count 100003
1|RINGLET_ALGO=doubling|--colls allreduce --max-count 1009
2|RINGLET_ALGO=doubling|--colls allreduce --max-count 30011
3|RINGLET_ALGO=doubling RINGLET_CHUNK_SIZE=16384|--colls allreduce --max-count 30011
4|RINGLET_ALGO=doubling|--colls allreduce --max-count 30011
5|RINGLET_ALGO=doubling|--colls allreduce --max-count 30011
1|RINGLET_ALGO=star|--colls allreduce --max-count 1009
2|RINGLET_ALGO=star|--colls allreduce --max-count 30011
3|RINGLET_ALGO=star|--colls allreduce --max-count 30011
4|RINGLET_ALGO=star|--colls allreduce --max-count 30011
5|RINGLET_ALGO=star|--colls allreduce --max-count 30011"
    TIMEOUT=900
else
    case "$SAN" in
    *thread*) LARGE="--max-count 65537 --quick" ;;
    *) LARGE="--max-count 262147" ;;
    esac
    SENV="RINGLET_CHUNK_SIZE=8192"
    PLAN="1|$SENV|$LARGE
2|$SENV|$LARGE
3|$SENV RINGLET_CHECK=1 RINGLET_ALGO=ring RINGLET_SHM_SLOT_SIZE=4096 RINGLET_SHM_NSLOTS=3|$LARGE
4|$SENV RINGLET_BOARD_BYTES=40|$LARGE
5|$SENV RINGLET_ALGO=oneshot|$LARGE
shm:8|$SENV|$LARGE
3|$SENV RINGLET_ALGO=halving|$LARGE --colls allreduce
4|$SENV RINGLET_ALGO=halving|$LARGE --colls allreduce
3|$SENV RINGLET_ALGO=doubling|--max-count 30011 --colls allreduce
4|$SENV RINGLET_ALGO=doubling|--max-count 30011 --colls allreduce
3|$SENV RINGLET_ALGO=star|--max-count 30011 --colls allreduce"
    TIMEOUT=1800
fi

# Reduction threads: P|environment|arguments, as PLAN, over tcp.
RCOLLS="--colls allreduce,reduce,reduce_scatter"
if [ -z "$SAN" ]; then
    POOLPLAN="2|RINGLET_REDUCE_THREADS=3|$RCOLLS
3|RINGLET_REDUCE_THREADS=3 RINGLET_REDUCE_MIN_BYTES=4096 RINGLET_CHUNK_SIZE=65536|$RCOLLS"
else
    POOLPLAN="2|$SENV RINGLET_REDUCE_THREADS=3 RINGLET_REDUCE_MIN_BYTES=1024|$LARGE $RCOLLS
3|$SENV RINGLET_REDUCE_THREADS=3 RINGLET_REDUCE_MIN_BYTES=1024|$LARGE $RCOLLS"
fi

# Device memory: P|environment|arguments, as PLAN.
DEVICE=${RINGLET_TEST_DEVICE:-sim}
MEMORY=${RINGLET_TEST_MEMORY:-host device}
JIT="RINGLET_SIM_JITTER=50"
# Stream calls hold nothing by default (sync); the P = 3 run holds the streams (memop) on
# the simulator, with a hardware queue per stream (CUDA_DEVICE_MAX_CONNECTIONS=32: a held
# stream blocks its queue, and ringlet's own work must not share it; README, Holding streams).
HOLD=
[ "$DEVICE" = sim ] && HOLD="RINGLET_STREAM_HOLD=memop CUDA_DEVICE_MAX_CONNECTIONS=32"
if [ -z "$SAN" ]; then
    DLARGE="--max-count 100003"
    DPLAN="1||$DLARGE
2||--max-count 262147
3|RINGLET_CHUNK_SIZE=16384 RINGLET_NCHUNKS_INFLIGHT=2 RINGLET_ALGO=ring $JIT $HOLD|$DLARGE
4|$JIT RINGLET_DEVICE_REDUCE=copy|$DLARGE
5|RINGLET_ALGO=oneshot|--max-count 30011
5|RINGLET_ALGO=halving $JIT|--colls allreduce --max-count 100003
3|RINGLET_ALGO=doubling RINGLET_CHUNK_SIZE=16384 $JIT|--colls allreduce --max-count 30011
3|RINGLET_ALGO=star $JIT|--colls allreduce --max-count 4099 --quick
2|RINGLET_ALGO=ring RINGLET_CHUNK_SIZE=1048580|--colls allreduce --max-count 524288 --quick"
else
    case "$SAN" in
    *thread*) DLARGE="--max-count 16411 --quick" ;;
    *) DLARGE="--max-count 65537" ;;
    esac
    DPLAN="ipc:1|RINGLET_CHUNK_SIZE=8192|$DLARGE
2|RINGLET_CHUNK_SIZE=8192 $JIT|$DLARGE
3|RINGLET_CHUNK_SIZE=8192 RINGLET_NCHUNKS_INFLIGHT=2 RINGLET_ALGO=ring $JIT $HOLD|$DLARGE
ipc:4|RINGLET_CHUNK_SIZE=8192|$DLARGE
ipc:5|RINGLET_ALGO=oneshot|--max-count 4099 --quick
ipc:4|RINGLET_CHUNK_SIZE=8192 RINGLET_ALGO=halving $JIT|--colls allreduce $DLARGE"
fi

# Device memory over CUDA IPC ("ipc": no transport forced, so device buffers between ranks
# of this host take cuda_ipc and host buffers shm; the run checks that cuda_ipc carried
# them), after the DPLAN runs: FIFO wrap-around with 4 KiB slots (pieces, and the device
# staging slots when a chunk does not fit one slot), the fallback when the peer's memory
# cannot be mapped (RINGLET_SIM_IPC_DENY, simulator only: staged through shared memory
# instead, and said), one device per rank (RINGLET_SIM_DEVICES=4, simulator only), the
# same on devices without peer access (RINGLET_SIM_PEER=0, as GPUs on PCIe without P2P:
# staged, saying so), and host buffers over a forced cuda_ipc.
IPCSMALL="RINGLET_CUDA_IPC_SLOT_SIZE=4096 RINGLET_CUDA_IPC_NSLOTS=2 RINGLET_CHUNK_SIZE=16384 $JIT"
# (Sanitizer builds: the ring row is DPLAN's ipc P = 4 again, left out; one device per rank
# at the smaller count.)
IPCM=30011
[ -n "$SAN" ] && IPCM=10007
IPCPLAN="3|$IPCSMALL|--memory device --max-count 10007 --quick"
[ -z "$SAN" ] && IPCPLAN+="
4|RINGLET_ALGO=ring|--memory device --max-count 30011 --quick"
[ "$DEVICE" = sim ] && IPCPLAN+="
3|RINGLET_SIM_IPC_DENY=1|--memory device --max-count 10007 --quick
4|RINGLET_SIM_DEVICES=4 $JIT|--memory device --max-count $IPCM --quick
4|RINGLET_SIM_DEVICES=4 RINGLET_SIM_PEER=0|--memory device --max-count 10007 --quick"
IPCPLAN+="
3|RINGLET_TRANSPORT=cuda_ipc|--memory host --max-count 10007 --quick"
DTRANSPORTS=${RINGLET_TEST_DEVICE_TRANSPORTS:-ipc $TRANSPORTS}

# Host and device buffers in one call (--memory odd-device: odd ranks on the device), over
# each of TRANSPORTS, after DPLAN: every rank must choose the same algorithm whatever its
# own buffers' kind (at 3 and 4 ranks over tcp on a 2-core machine auto takes the star;
# before, a rank on the device took the one-shot path there and the call hung); recursive
# doubling, which auto takes where the ranks have cores of their own, forced at 4.
MIXPLAN="3||--memory odd-device --max-count 4099 --quick
4||--memory odd-device --max-count 4099 --quick
4|RINGLET_ALGO=doubling|--memory odd-device --max-count 4099 --quick"
# (sanitizer builds: over tcp alone, where the choice once differed)
[ -n "$SAN" ] && MIXPLAN=$(sed 's/^/tcp:/' <<<"$MIXPLAN")

# The GPU suite's short runs (tests/gpu/run.sh) name a plan in RINGLET_COLLECTIVES_PLAN that
# takes the place of DPLAN and IPCPLAN: device memory, every collective, --quick (two ops per
# dtype) on 4 dtypes per run that between them take every op, counts 0, 1, P-1, P+1 and L:
#   quick     P = 2: the default chunk and slot sizes with L = 1000003 (8 MB of float64: many
#             chunks, the shared-memory FIFO wraps), then 16 KiB chunks, 2 in flight, the
#             ring at every count, 4 KiB shared-memory and CUDA IPC slots with L = 100003 (a
#             chunk spans several slots, the FIFOs wrap every chunk)
#   quick-p4  P = 4: the small chunks and slots of the second run, L = 100003 (with
#             tests/gpu/mps.sh: 4 processes on one GPU, with and without MPS)
# Unset: DPLAN and IPCPLAN as above.
QDT1="--quick --dtypes int8,float16,float32,float64"   # ops: sum max, prod min, max avg, min sum
QDT2="--quick --dtypes uint8,bfloat16,float32,uint64"  # ops: prod min, avg prod, max avg, sum max
QSMALL="RINGLET_CHUNK_SIZE=16384 RINGLET_NCHUNKS_INFLIGHT=2 RINGLET_ALGO=ring RINGLET_SHM_SLOT_SIZE=4096 \
RINGLET_SHM_NSLOTS=3 RINGLET_CUDA_IPC_SLOT_SIZE=4096 RINGLET_CUDA_IPC_NSLOTS=2 $JIT"
case ${RINGLET_COLLECTIVES_PLAN:-} in
"") ;;
quick)
    DPLAN="2||--max-count 1000003 $QDT1
2|$QSMALL|--max-count 100003 $QDT2"
    IPCPLAN="" TIMEOUT=300 ;;
quick-p4)
    DPLAN="4|$QSMALL|--max-count 100003 $QDT1"
    IPCPLAN="" TIMEOUT=300 ;;
*)
    echo "FAIL: RINGLET_COLLECTIVES_PLAN=$RINGLET_COLLECTIVES_PLAN: unknown plan (quick, quick-p4)"
    exit 1 ;;
esac

fails=0
now_ms() { echo $(($(date +%s%N) / 1000000)); }
t_all=$(now_ms)
# run_plan transport memory-env args-prefix plan
run_plan() {
    local tr=$1 menv=$2 margs=$3 plan=$4 P envs args t rc dt good cases name trenv=""
    [ "$tr" != ipc ] && trenv="RINGLET_TRANSPORT=$tr"
    while IFS='|' read -r P envs args; do
        [ -n "$P" ] || continue
        if [[ "$P" == *:* ]]; then # "tr:P": the row runs over that transport only
            [ "${P%%:*}" = "$tr" ] || continue
            P=${P#*:}
        fi
        t=$(now_ms)
        CURRENT="$tr P=$P $margs $args${envs:+ ($envs)}"
        # shellcheck disable=SC2086
        env $trenv $menv RINGLET_DEBUG=INFO $envs "$RUN" -n "$P" --timeout "$TIMEOUT" "$PROG" --seed "$SEED" $margs \
            $args $EXTRA >"$TMP/out" 2>"$TMP/err"
        rc=$?
        CURRENT=""
        dt=$(($(now_ms) - t))
        good=$(grep -cE "^\[[0-9]+\] collectives: rank [0-9]+ of $P: [1-9][0-9]* cases checked, 0 failed" "$TMP/out")
        cases=$(sed -n "s/^\[0\] collectives: rank 0 of $P: \([0-9]*\) cases checked.*/\1/p" "$TMP/out")
        name="$tr${menv:+ $DEVICE} P=$P $margs ${args:-(rotating at the large count)}${EXTRA:+ $EXTRA}${envs:+ ($envs)}"
        local why=""
        # Over ipc, device buffers must have gone over cuda_ipc, or (denied) been staged, saying why.
        if [ "$tr" = ipc ] && [ "$P" -gt 1 ] && [[ "$margs $args" == *"--memory device"* ]]; then
            if [[ "$envs" == *IPC_DENY* || "$envs" == *SIM_PEER=0* ]]; then
                grep -q "not over cuda_ipc" "$TMP/err" || why="no log line saying why cuda_ipc was not used"
                [[ "$envs" == *SIM_PEER=0* ]] && ! grep -q "not over cuda_ipc (.*peer access is not supported" "$TMP/err" &&
                    why="no log line saying that the devices have no peer access"
                grep -q "over cuda_ipc (device buffers)" "$TMP/err" && why="cuda_ipc used although the peers' memory cannot be mapped"
            else
                grep -q "over cuda_ipc (device buffers)" "$TMP/err" || why="device buffers did not go over cuda_ipc"
            fi
        fi
        # A free or an IPC close that failed (one on the wrong device's context, say) is only a warning.
        grep -q "WARN: freeing device memory" "$TMP/err" && why="a free or an IPC close failed (WARN: freeing device memory)"
        # A forced all-reduce algorithm must have run on every rank (else the row tested the
        # default again): the library's INFO line for the first call by it.
        local forced="" algo_name=""
        [[ "$envs" =~ RINGLET_ALGO=([a-z]+) ]] && forced=${BASH_REMATCH[1]}
        case "$forced" in
        halving) algo_name="recursive halving" ;;
        doubling) algo_name="recursive doubling" ;;
        star) algo_name="star" ;;
        oneshot) algo_name="one-shot" ;;
        ring) algo_name="ring" ;;
        esac
        if [ -n "$algo_name" ] && [ "$P" -gt 1 ] &&
            [ "$(grep -cE "INFO: allreduce #[0-9]+: by the $algo_name algorithm" "$TMP/err")" != "$P" ]; then
            why="RINGLET_ALGO=$forced: not every rank ran an all-reduce by the $algo_name algorithm"
        fi
        # With reduction threads, every rank must have split a reduction (else the run tested nothing new).
        if [[ "$envs" == *RINGLET_REDUCE_THREADS=* ]] &&
            [ "$(grep -cE 'INFO: reduction threads: [0-9]+ workers started' "$TMP/err")" != "$P" ]; then
            why="the reduction threads did not start on every rank"
        fi
        if [ "$rc" = 0 ] && [ "$good" = "$P" ] && [ -z "$why" ]; then
            echo "ok:   $name: ${cases:-?} cases per rank, $((dt / 1000)).$((dt % 1000 / 100)) s"
        else
            fails=$((fails + 1))
            echo "FAIL: $name: launcher exit status $rc, $good of $P ranks passed ($((dt / 1000)) s)${why:+: $why}"
            grep -E 'FAIL|not printed|collectives: rank' "$TMP/out" | head -n 60
            echo "----- last lines of stderr:"
            grep -vE ' INFO: ' "$TMP/err" | tail -n 20
            echo "-----"
        fi
    done <<<"$plan"
}
# A setting on rank 1 alone that cannot work (2 ranks, the simulator, device memory): the run
# must fail at once, a line of its output (lines: "all", or "0": rank 0's only) matching
# pattern, and not by waiting for RINGLET_TIMEOUT (60 s here: "did not connect").
# rank1_setting label setting extra-args lines pattern
rank1_setting() {
    local label=$1 setting=$2 extra=$3 lines=$4 pat=$5 t rc n
    t=$(now_ms)
    # Grace: rank 1 exits at once after its error; rank 0 must be let to say its own (the
    # launcher stopped it first when rank 0 was slow: "0 lines (0) name the cause").
    # shellcheck disable=SC2086
    RINGLET_DEVICE=sim RINGLET_TIMEOUT=60 "$RUN" -n 2 --timeout 180 --grace 60 sh -c \
        '[ "$RANK" = 1 ] && export "$1"; shift; exec "$@"' sh "$setting" \
        "$PROG" --seed 1 --memory device --max-count 1007 --quick $extra >"$TMP/out" 2>"$TMP/err"
    rc=$?
    if [ "$lines" = all ]; then n=$(cat "$TMP/out" "$TMP/err" | grep -c "$pat")
    else n=$(cat "$TMP/out" "$TMP/err" | grep "^\[$lines\]" | grep -c "$pat"); fi
    if [ "$rc" != 0 ] && [ "$n" -gt 0 ] && ! grep -q "did not connect" "$TMP/out" "$TMP/err"; then
        echo "ok:   ipc sim P=2, $label, $(($(now_ms) - t)) ms"
    else
        fails=$((fails + 1))
        echo "FAIL: ipc sim P=2, $label: exit status $rc, $n lines ($lines) name the cause"
        tail -n 20 "$TMP/out" "$TMP/err"
    fi
}
# CUDA IPC one way only (RINGLET_SIM_IPC_DENY on rank 1 alone): rank 1 cannot map rank 0's
# memory and stages, rank 0 could use cuda_ipc. That cannot work; it must fail naming the
# cause (rank 1 marks the pair declined).
one_way_ipc() {
    rank1_setting "CUDA IPC one way only (rank 1 cannot map rank 0's memory): fails naming it" \
        RINGLET_SIM_IPC_DENY=1 "" all "CUDA IPC works one way only between these two processes"
}
# CUDA IPC slots of another count on rank 1 (RINGLET_CUDA_IPC_NSLOTS=3, rank 0 the default):
# rank 1's receive fails naming the setting, and rank 0, whose peer then aborts, must name it
# too (the aborting rank's last error travels with its abort), not only "rank 1 aborted".
ipc_slots_differ() {
    rank1_setting "CUDA IPC slots differ (rank 1 RINGLET_CUDA_IPC_NSLOTS=3): rank 0 names it too" \
        RINGLET_CUDA_IPC_NSLOTS=3 "--colls broadcast" 0 "RINGLET_CUDA_IPC_NSLOTS / _SLOT_SIZE must be the same on every rank"
}
# cuda_ipc disabled on some ranks: their pairs stage through shared memory while the
# others use cuda_ipc. Every rank must still take the same path for the small calls, every
# collective at small and larger counts. 3 ranks on device memory, rank 2 without cuda_ipc
# (before, rank 2 took the shared-memory board, the others messages, and all three waited
# for RINGLET_TIMEOUT); 4 ranks, odd ranks on device memory with cuda_ipc, even ranks on
# host memory without it (each mixed pair has a rank without cuda_ipc, so the mix is
# allowed; the even ranks took the board for their host buffers, and all four waited).
ipc_off_on_some() { # P "test of RANK for no cuda_ipc" memory label
    local t rc good
    t=$(now_ms)
    RINGLET_DEVICE=sim RINGLET_TIMEOUT=30 "$RUN" -n "$1" --timeout 180 sh -c \
        "$2 && export RINGLET_CUDA_IPC_DISABLE=1; exec \"\$@\"" sh \
        "$PROG" --seed 7 --memory "$3" --max-count 4099 --quick >"$TMP/out" 2>"$TMP/err"
    rc=$?
    good=$(grep -cE "^\[[0-9]+\] collectives: rank [0-9]+ of $1: [1-9][0-9]* cases checked, 0 failed" "$TMP/out")
    if [ "$rc" = 0 ] && [ "$good" = "$1" ]; then
        echo "ok:   ipc sim P=$1, $4: $(($(now_ms) - t)) ms"
    else
        fails=$((fails + 1))
        echo "FAIL: ipc sim P=$1, $4: exit status $rc, $good of $1 ranks passed"
        grep -E 'FAIL|collectives: rank' "$TMP/out" | head -n 20
        grep -vE ' INFO: ' "$TMP/err" | tail -n 10
    fi
}
ipc_off_on_one_rank() {
    ipc_off_on_some 3 '[ "$RANK" = 2 ]' device "cuda_ipc disabled on rank 2 alone"
    ipc_off_on_some 4 '[ $((RANK % 2)) = 0 ]' odd-device \
        "host memory without cuda_ipc on ranks 0 and 2, device memory with it on 1 and 3"
}
for mem in $MEMORY; do
    if [ "$mem" = host ]; then
        for tr in $TRANSPORTS; do run_plan "$tr" "" "" "$PLAN"; done
        [[ " $TRANSPORTS " == *" tcp "* ]] && run_plan tcp "" "" "$POOLPLAN"
    elif [ "$DEVICE" != none ]; then
        for tr in $DTRANSPORTS; do run_plan "$tr" "RINGLET_DEVICE=$DEVICE" "--memory device" "$DPLAN"; done
        [[ " $DTRANSPORTS " == *" ipc "* ]] && [ -n "$IPCPLAN" ] && run_plan ipc "RINGLET_DEVICE=$DEVICE" "" "$IPCPLAN"
        if [ -z "${RINGLET_COLLECTIVES_PLAN:-}" ]; then
            for tr in $TRANSPORTS; do run_plan "$tr" "RINGLET_DEVICE=$DEVICE" "" "$MIXPLAN"; done
        fi
        if [ "$DEVICE" = sim ] && [[ " $DTRANSPORTS " == *" ipc "* ]] && [ -z "${RINGLET_COLLECTIVES_PLAN:-}" ]; then
            one_way_ipc
            ipc_slots_differ
            ipc_off_on_one_rank
        fi
    fi
done
dt=$(($(now_ms) - t_all))
if [ $fails = 0 ]; then
    echo "collectives: all passed ($((dt / 1000)) s)"
    exit 0
fi
echo "collectives: $fails runs failed ($((dt / 1000)) s)"
exit 1

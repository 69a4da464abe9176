#!/usr/bin/env bash
# The NCCL API (tests/mp/nccl_api.c, a program written against ringlet's nccl.h and
# linked to its libnccl.so.2) through ringlet-run: every case at P = 1..4 on host memory
# and on device memory over the device layer's backend RINGLET_TEST_DEVICE (default sim,
# with RINGLET_SIM_JITTER=100 so that a missing stream wait shows); a peer that aborts
# (P = 2, 3); an abort from another thread while a call waits (P = 2); ncclCommInitAll in one process (on the simulator: 3 ranks on 2 devices, two
# of them sharing one); two ranks per process made and driven by one thread through groups
# (P = 2, and on the simulator P = 3 over 2 devices); host memory again at P = 2 with the device backend present;
# 3 ranks made on threads of their own and destroyed one by one by one thread.
# Exit 0 = all passed, 1 = a failure.
set -u
BUILD=${BUILD:-build}
RUN="$BUILD/bin/ringlet-run"
PROG="$BUILD/tests/mp/nccl_api"
for f in "$RUN" "$PROG" "$BUILD/lib/libnccl.so.2"; do
    [ -e "$f" ] || { echo "FAIL: $f not found (build first, or set BUILD)"; exit 1; }
done
COUNT=10007
case "${SANITIZE:-}" in *thread*) COUNT=1009 ;; esac
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-nccl.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export RINGLET_TIMEOUT=${RINGLET_TIMEOUT:-30}
fails=0
one() { # label P args...
    local label=$1 P=$2
    shift 2
    rm -rf "$TMP/d" && mkdir "$TMP/d"
    if [ "$P" = 0 ]; then
        timeout 300 "$PROG" --count "$COUNT" --dir "$TMP/d" "$@" >"$TMP/out" 2>"$TMP/err"
        P=1
    else
        "$RUN" -n "$P" --timeout 300 --grace 30 "$PROG" --count "$COUNT" --dir "$TMP/d" "$@" >"$TMP/out" 2>"$TMP/err"
    fi
    local rc=$? n want=$P
    [[ "$*" == *fault* ]] && want=$((P - 1)) # rank 1 aborts and reports nothing
    n=$(grep -cE "nccl_api: rank [0-9]+ of [0-9]+: [1-9][0-9]* checks, 0 failed" "$TMP/out")
    if [ "$rc" = 0 ] && [ "$n" -ge "$want" ]; then
        echo "ok:   $label: $(grep -m1 -E '^(\[0\] )?nccl_api: rank 0 ' "$TMP/out" | grep -oE '[0-9]+ checks') on rank 0"
    else
        fails=$((fails + 1))
        echo "FAIL: $label: exit status $rc, $n of $want ranks passed"
        tail -n 30 "$TMP/out" "$TMP/err"
    fi
}
for mem in host device; do
    if [ $mem = device ]; then
        export RINGLET_DEVICE=${RINGLET_TEST_DEVICE:-sim}
        [ "$RINGLET_DEVICE" = sim ] && export RINGLET_SIM_JITTER=${RINGLET_SIM_JITTER:-100}
    fi
    for P in 1 2 3 4; do one "$mem all P=$P" "$P" --case all --memory $mem; done
    for P in 2 3; do one "$mem fault P=$P" "$P" --case fault --memory $mem; done
    one "$mem abort during a call P=2" 2 --case abortcall --memory $mem
    if [ $mem = device ] && [ "$RINGLET_DEVICE" = sim ]; then
        RINGLET_SIM_DEVICES=2 one "$mem initall (3 ranks, 2 devices)" 0 --case initall --memory $mem
        one "$mem pairs P=2 (2 ranks per process, one device)" 2 --case pairs --memory $mem
        RINGLET_SIM_DEVICES=2 one "$mem pairs P=3 (2 ranks per process on 2 devices)" 3 --case pairs --memory $mem
        # Streams held: each communicator's stream 0 is its own device's, whatever device
        # is current at ncclGroupEnd.
        RINGLET_SIM_DEVICES=2 RINGLET_STREAM_HOLD=memop CUDA_DEVICE_MAX_CONNECTIONS=32 \
            one "$mem pairs P=3 (2 devices, streams held)" 3 --case pairs --memory $mem
    else
        one "$mem initall" 0 --case initall --memory $mem
        one "$mem pairs P=2 (2 ranks per process)" 2 --case pairs --memory $mem
    fi
done
# Host buffers in a process with a device backend (as on a GPU machine): the communicator
# still has the current device (ncclCommCuDevice).
one "host all P=2, device backend $RINGLET_DEVICE" 2 --case all --memory host
# NCCL_COMM_BLOCKING=1 overrides every config, as in NCCL (a split checks it).
NCCL_COMM_BLOCKING=1 one "host all P=2, NCCL_COMM_BLOCKING=1" 2 --case all --memory host
# NCCL_COMM_BLOCKING=0 makes ncclCommInitAll's communicators non-blocking (a blocking one fails at the
# deadline, RINGLET_TIMEOUT). No device backend: with one, calls on stream 0 are ordered on
# that one stream, and one thread's ungrouped calls over several communicators wait for
# each other there, as NCCL's kernels would (NCCL asks for a group).
NCCL_COMM_BLOCKING=0 RINGLET_DEVICE=none one "host initall, NCCL_COMM_BLOCKING=0" 0 --case initall --memory host
one "abort of a non-blocking init whose peer never comes" 0 --case abortinit
one "3 ranks made on threads of their own, destroyed one by one by one thread" 0 --case threads
# NCCL's environment names where ringlet's mean the same are read where ringlet's own is
# not set (the core reads them, util.c's rl_env_get): an interface that does not exist fails
# the id (the message names NCCL's variable), an IB timeout out of range fails the init; with
# RINGLET_SOCKET_IFNAME set, the NCCL name is passed over and the job runs.
refused() { # label pattern env... : P = 2, --case all on host memory must fail saying pattern
    local label=$1 pattern=$2
    shift 2
    rm -rf "$TMP/d" && mkdir "$TMP/d"
    env -u RINGLET_SOCKET_IFNAME -u RINGLET_IB_TIMEOUT "$@" NCCL_DEBUG=INFO "$RUN" -n 2 --timeout 120 --grace 10 "$PROG" --count 11 --dir "$TMP/d" --case all \
        --memory host >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    if [ $rc != 0 ] && grep -qF -- "$pattern" "$TMP/out" "$TMP/err"; then
        echo "ok:   $label: refused, saying $pattern"
    else
        fails=$((fails + 1))
        echo "FAIL: $label: exit status $rc, no \"$pattern\" in its output"
        tail -n 20 "$TMP/out" "$TMP/err"
    fi
}
refused "NCCL_SOCKET_IFNAME" "matches NCCL_SOCKET_IFNAME=nosuch0" NCCL_SOCKET_IFNAME=nosuch0
refused "NCCL_IB_TIMEOUT" "NCCL_IB_TIMEOUT=99, read for RINGLET_IB_TIMEOUT: must be" NCCL_IB_TIMEOUT=99
# (NCCL_IB_SL and NCCL_IB_TC of -1, NCCL's "not set", are not read: ringlet's range is 0..)
NCCL_SOCKET_IFNAME=nosuch0 RINGLET_SOCKET_IFNAME=lo NCCL_IB_SL=-1 NCCL_IB_TC=-1 \
    one "host all P=2, NCCL_SOCKET_IFNAME under RINGLET_SOCKET_IFNAME, NCCL_IB_SL=-1" 2 --case all --memory host
[ $fails = 0 ] && { echo "nccl: all passed"; exit 0; }
echo "nccl: $fails failed"
exit 1

#!/usr/bin/env bash
# Stream semantics on device buffers (tests/mp/stream.c) at P = 2 through ringlet-run, on the
# device layer's backend RINGLET_TEST_DEVICE (default sim: the simulated GPU, with
# RINGLET_SIM_JITTER=100 so that a missing wait shows), once per transport in
# RINGLET_TEST_TRANSPORTS (default "ipc shm tcp"; ipc: none forced, so device buffers go
# over cuda_ipc):
#   order  work queued before a stream call is seen, work queued after it sees the result
#          (rank 0 holds its stream while it queues: nothing can run early by construction)
#   abort  a rank aborts with a stream call pending that its peer never joins: the stream
#          goes on, get_async_error reports it
#   async  the peer leaves: the stream call fails, the stream goes on, get_async_error names it
#   legacy all-reduces on the legacy default stream (the library's streams must not block on it)
#   devices (simulator) buffers and stream on device 1, called with device 0 current
#   legacy-devices (simulator) buffers on device 1, the default stream, called with device 0
#          current: the call takes device 1's default stream (held: by construction)
#   fresh  (simulator) a process on device 1 only, its calls from a thread that never chose a
#          device: right results, and no context made on device 0
#   host   (simulator) a process that never chooses a device, on host buffers only (a CPU job
#          on a GPU machine): right results, and no context made on any device
#   probe-device  rank 0 makes a context on device 0 before init, then passes buffers of the last
#          device, which rank 1 uses from after init on; with two devices that cannot access
#          each other (RINGLET_SIM_DEVICES=2 RINGLET_SIM_PEER=0): right results, and both ranks
#          over cuda_ipc (a probe made on the init device judged the wrong pair of devices)
#   pidns  rank 1 in a PID namespace of its own, rank 0 on host buffers only: rank 1's device
#          call waits for rank 0's probe until RINGLET_TIMEOUT, not taking it for gone
#   probe-order  two communicators whose probes both come at first use, started in opposite
#          orders on the two ranks (one of rank 0's from a thread): right results, no timeout
#   capture an all-reduce on a stream capturing a CUDA graph is refused (INVALID_USAGE) and the
#          capture still ends cleanly (shm, no hold only: the refusal comes before any of it)
#   capture-other  another thread's capture (global mode) open across all-reduces on another
#          stream: right results, and the capture ends cleanly (ipc and shm, no hold)
#   capture-self  the calling thread's own capture (global mode) open across an all-reduce on
#          another stream: exact result, and the capture ends cleanly (ipc and shm, no hold)
#   sticky (simulator; ipc and shm) rank 0's own kernel faults (a sticky error), then both ranks
#          all-reduce: rank 0's call fails at entry with the CUDA error, rank 1's at once with
#          RINGLET_ERR_REMOTE naming rank 0 and that error (RINGLET_TIMEOUT=120: a failure at the
#          deadline would come late, and without the cause; rank 0 stays until rank 1 is done)
#   per-thread  all-reduces on cudaStreamPerThread from two threads at once (ipc and shm)
#   empty-in-group  a group on device buffers whose first calls are a send and a receive of 0
#          elements with NULL buffers (torch's empty CUDA tensor) and a barrier: it runs, the
#          data exact (ipc and tcp; it was refused on each rank as mixing host and device);
#          then a zero-element receive alone in a group (its stream's device) against a group
#          with device buffers that sends it
#   pending-copies (simulator, ipc and shm) a receive whose copies cannot start (one hardware queue,
#          held by the program's own spinning kernel) fails, saying that it waits on its own
#          device, and the destroy keeps the slots those copies read mapped; they run once
#          the kernel ends
#   abort-copies (simulator; ipc and shm, device buffers) an abort with a
#          receive's copies queued behind the program's kernel returns at once (RINGLET_TIMEOUT=600:
#          an abort that waits for them outlasts the run's limit); the receive fails
#   two-threads (memop and kernel holds, ipc and tcp) two threads of each rank make 200
#          all-reduces each on one stream at once: all exact, no timeout (a hold queued
#          before an earlier-numbered call's event kept that call from ever starting)
#   user-stuck (simulator, ipc) the program's kernel holds the stream of rank 1's all-reduce:
#          the call fails at RINGLET_TIMEOUT, and a ringlet_mem_free after it returns
#   queue-full (simulator, streams held by memop and by kernel, ipc and tcp) 12 all-reduces on
#          one stream of a queue depth of 6 (RINGLET_SIM_QUEUE_DEPTH), queued before the peer
#          joins: the call that finds the stream full blocks until the operations ahead end,
#          which the library must still run (no lock of theirs held): all exact
#   failed-copies (simulator, pinned host buffers over cuda_ipc) the same, but a thread ends the kernel
#          once the communicator reports the failure: the receive must return only after that (a
#          failed call hands its buffer back, so its copies must have run)
# every case with streams held by stream memory operations (RINGLET_STREAM_HOLD=memop), order
# and legacy (STREAM_KERNEL_CASES) also by a spinning kernel (RINGLET_STREAM_HOLD=kernel), and
# (STREAM_SYNC_CASES) with streams not held, the default (sync: order's held round then
# checks that the result is in place when the call returns), order again with one hardware
# work queue (CUDA_DEVICE_MAX_CONNECTIONS=1); the INFO log must say which, on both ranks.
# STREAM_RUN_LIMIT and STREAM_RUN_GRACE (default 180 and 60 s): each run's limit in ringlet-run
# (the GPU suite's quick tier sets them short, so that one hung run leaves time for the others).
# On the simulator, also prep_pair (3 ranks): a stream call whose preparation failed, taken
# off the queue with the call after it, fails both (its request was read after it was freed).
# Exit 0 = all passed, 1 = a failure, 77 = no device backend.
set -u
BUILD=${BUILD:-build}
RUN="$BUILD/bin/ringlet-run"
PROG="$BUILD/tests/mp/stream"
for f in "$RUN" "$PROG"; do
    [ -x "$f" ] || { echo "FAIL: $f not found (build first, or set BUILD)"; exit 1; }
done
export RINGLET_DEVICE=${RINGLET_TEST_DEVICE:-sim}
if [ "$RINGLET_DEVICE" = sim ]; then export RINGLET_SIM_JITTER=${RINGLET_SIM_JITTER:-100}; fi
source "$(dirname "$0")/lib/scratch.bash"
scratch_dir stream
COUNT=300007
case "${SANITIZE:-}" in *thread*) COUNT=30011 ;; esac
fails=0
# run_case transport case [VAR=value ...]
run_case() {
    local tr=$1 cas=$2
    shift 2
    rm -rf "$TMP/d" && mkdir "$TMP/d"
    local tenv="RINGLET_TRANSPORT=$tr"
    [ "$tr" = ipc ] && tenv="RINGLET_TRANSPORT=auto"
    CURRENT="$tr $cas${*:+ ($*)}"
    local t0=$SECONDS
    env "$tenv" RINGLET_TIMEOUT=10 RINGLET_DEBUG=INFO "$@" "$RUN" -n 2 --timeout "${STREAM_RUN_LIMIT:-180}" --grace "${STREAM_RUN_GRACE:-60}" ${WRAP:-} "$PROG" --case "$cas" \
        --count "$COUNT" --dir "$TMP/d" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    CURRENT=""
    if grep -q '^\[0\] SKIP' "$TMP/out"; then
        # Only a real device may be missing: the simulator is part of the library, and
        # a skip after a failed case would hide that failure.
        if [ "${RINGLET_DEVICE:-sim}" = sim ] || [ "$fails" -gt 0 ]; then
            echo "FAIL: $tr $cas: $(grep -m1 SKIP "$TMP/out" | sed 's/^\[0\] //')"
            fails=$((fails + 1))
            return
        fi
        grep -m1 SKIP "$TMP/out" | sed 's/^\[0\] //'
        exit 77
    fi
    local n label="$tr $cas${*:+ ($*)}"
    n=$(grep -cE "^\[[01]\] stream: rank [01]: OK $cas" "$TMP/out")
    # The communicator's INFO line says how its streams were held (memop or kernel, the
    # mode the device layer uses), on every rank.
    local held nheld=0
    held=$(grep -m1 -oE 'streams held by (memop|kernel|sync)' "$TMP/err")
    [ -n "$WANT_HOLD" ] && nheld=$(grep -cE "streams held by $WANT_HOLD( \(|\$)" "$TMP/err")
    local hold_ok=1
    [ -n "$WANT_HOLD" ] && [ "$nheld" -lt 2 ] && hold_ok=0
    if [ "$rc" = 0 ] && [ "$n" = 2 ] && [ $hold_ok = 1 ]; then
        echo "ok:   $label${held:+, $held} ($((SECONDS - t0)) s)"
        grep -E "OK $cas:" "$TMP/out" | sed 's/^/      /'
    else
        fails=$((fails + 1))
        local why=""
        [ $hold_ok = 0 ] && why=" (want streams held by $WANT_HOLD on both ranks; saw: ${held:-none})"
        echo "FAIL: $label: launcher exit status $rc, $n of 2 ranks OK$why"
        tail -n 30 "$TMP/out"
        grep -v ' INFO: ' "$TMP/err" | tail -n 30
    fi
}
# A held stream blocks the hardware work queue it heads, and a GPU has 8 by default
# (CUDA_DEVICE_MAX_CONNECTIONS; the simulator holds the same): with more streams than queues
# in the process, ringlet's own copies can share the held one's queue and never run (order
# timed out so, as holds did on the H200). Holds need a queue per stream: 32.
# The default, no hold (sync), first (what most programs run; on a GPU the opt-in holds below
# have timed out before), then holds by stream memory operations and by a spinning kernel
# (RINGLET_STREAM_HOLD=memop|kernel), each checked in the INFO log. No hold: a call returns
# with its result in place; also with one hardware work queue (CUDA_DEVICE_MAX_CONNECTIONS=1:
# ringlet's streams share the caller's queue).
WANT_HOLD=sync
for tr in ${RINGLET_TEST_TRANSPORTS:-ipc shm}; do
    for cas in ${STREAM_SYNC_CASES:-order legacy}; do run_case "$tr" "$cas"; done
    run_case "$tr" order CUDA_DEVICE_MAX_CONNECTIONS=1
done
WANT_HOLD=memop
for tr in ${RINGLET_TEST_TRANSPORTS:-ipc shm tcp}; do
    for cas in order abort async legacy; do
        run_case "$tr" "$cas" RINGLET_STREAM_HOLD=memop CUDA_DEVICE_MAX_CONNECTIONS=32
    done
done
WANT_HOLD=kernel
for tr in ${RINGLET_TEST_TRANSPORTS:-ipc shm}; do
    for cas in ${STREAM_KERNEL_CASES:-order legacy}; do run_case "$tr" "$cas" RINGLET_STREAM_HOLD=kernel CUDA_DEVICE_MAX_CONNECTIONS=32; done
done
# Two threads' calls on one stream at once: each call's hold after the events of the calls
# numbered before it. STREAM_THREAD_HOLDS (default "memop kernel"; empty: none, as the GPU
# suite's quick tier sets it) names the holds it runs with.
for tr in ${RINGLET_TEST_TRANSPORTS:-ipc tcp}; do
    for hold in ${STREAM_THREAD_HOLDS-memop kernel}; do
        WANT_HOLD=$hold run_case "$tr" two-threads RINGLET_STREAM_HOLD=$hold CUDA_DEVICE_MAX_CONNECTIONS=32
    done
done
WANT_HOLD=
# A capturing stream (CUDA graphs) is refused, and the capture survives; another thread's
# capture survives calls on other streams (ringlet's threads keep out of it).
run_case shm capture
for tr in ${RINGLET_TEST_TRANSPORTS:-ipc shm}; do run_case "$tr" capture-other; done
# The calling thread's own capture survives its calls on another stream.
for tr in ${RINGLET_TEST_TRANSPORTS:-ipc shm}; do run_case "$tr" capture-self; done
# cudaStreamPerThread: each calling thread's own default stream.
for tr in ${RINGLET_TEST_TRANSPORTS:-ipc shm}; do run_case "$tr" per-thread; done
# A device group whose first calls have no buffers (0 elements, NULL; a barrier).
for tr in ${RINGLET_TEST_TRANSPORTS:-ipc tcp}; do run_case "$tr" empty-in-group; done
# pending_checks transport pattern: the pending-copies case's messages (after run_case).
pending_checks() {
    if ! grep -qE "waiting to receive from rank 0: $2" "$TMP/out"; then
        fails=$((fails + 1))
        echo "FAIL: $1 pending-copies: rank 1's error does not say that its own device copies were not finished:"
        grep -m1 "pending-copies: the receive failed" "$TMP/out"
    fi
    if grep -qE "refused by the simulator|deadlock on a GPU" "$TMP/err"; then
        fails=$((fails + 1))
        echo "FAIL: $1 pending-copies: a call that would wait behind the program's kernel on a GPU:"
        grep -m3 -E "refused by the simulator|deadlock on a GPU" "$TMP/err"
    fi
}
if [ "$RINGLET_DEVICE" = sim ]; then
    # The current device is per thread: buffers and stream on device 1, called from device 0.
    for tr in ${RINGLET_TEST_TRANSPORTS:-ipc shm}; do run_case "$tr" devices RINGLET_SIM_DEVICES=2; done
    # The default stream is the buffers' device's, whatever device is current (held: by
    # construction; not held: the call waits for it).
    for tr in ${RINGLET_TEST_TRANSPORTS:-ipc shm}; do
        run_case "$tr" legacy-devices RINGLET_SIM_DEVICES=2 RINGLET_STREAM_HOLD=memop CUDA_DEVICE_MAX_CONNECTIONS=32
    done
    for tr in ${RINGLET_TEST_TRANSPORTS:-ipc}; do run_case "$tr" legacy-devices RINGLET_SIM_DEVICES=2; done
    # A call that finds its stream's queue full blocks in the runtime (as on a GPU), and
    # must not hold what the operations ahead of it need.
    for tr in ${RINGLET_TEST_TRANSPORTS:-ipc tcp}; do
        for hold in memop kernel; do
            WANT_HOLD=$hold run_case "$tr" queue-full RINGLET_SIM_QUEUE_DEPTH=6 RINGLET_STREAM_HOLD=$hold \
                CUDA_DEVICE_MAX_CONNECTIONS=32
        done
    done
    # The program's own work before a call never ends: the call fails at RINGLET_TIMEOUT,
    # and a free of the program's through ringlet after it does not wait behind that work.
    for tr in ${RINGLET_TEST_TRANSPORTS:-ipc}; do run_case "$tr" user-stuck RINGLET_TIMEOUT=3; done
    # A sticky CUDA error at a call fails the communicator on every rank at once.
    for tr in ${RINGLET_TEST_TRANSPORTS:-ipc shm}; do run_case "$tr" sticky RINGLET_TIMEOUT=120; done
    # A device the process never uses gets no context from ringlet's calls.
    for tr in ${RINGLET_TEST_TRANSPORTS:-ipc shm}; do run_case "$tr" fresh RINGLET_SIM_DEVICES=2; done
    # A job on host buffers that never chose a device makes no context anywhere.
    for tr in ${RINGLET_TEST_TRANSPORTS:-ipc tcp}; do run_case "$tr" host RINGLET_SIM_DEVICES=2; done
fi
# cuda_ipc's probe is made on the buffers' device, not on the device current at init.
case " ${RINGLET_TEST_TRANSPORTS:-ipc} " in *" ipc "*)
    PDENV=""
    [ "$RINGLET_DEVICE" = sim ] && PDENV="RINGLET_SIM_DEVICES=2 RINGLET_SIM_PEER=0"
    # shellcheck disable=SC2086
    run_case ipc probe-device $PDENV
    for r in 0 1; do
        if ! grep -qE "^\[$r\].*sending to rank $((1 - r)) over cuda_ipc \(device buffers\)" "$TMP/err"; then
            fails=$((fails + 1))
            echo "FAIL: ipc probe-device: rank $r did not send over cuda_ipc:"
            grep -E "^\[$r\].*(probe|staged|over |one way)" "$TMP/err" | head -5
        fi
    done
    # Rank 1 in a PID namespace of its own (root, unshare): rank 0's pid means nothing there.
    if unshare --pid --fork --kill-child true 2>/dev/null; then
        printf '#!/bin/sh\n[ "$RANK" = 1 ] && exec unshare --pid --fork --kill-child "$@"\nexec "$@"\n' >"$TMP/pidns.sh"
        chmod +x "$TMP/pidns.sh"
        WRAP="$TMP/pidns.sh" run_case ipc pidns RINGLET_TIMEOUT=3
    else
        echo "skip: ipc pidns (unshare --pid needs root)"
    fi
    run_case ipc probe-order
    # The group part: no communicator's early preparation waited in vain for a peer's probe.
    if grep -q "an early preparation failed" "$TMP/err"; then
        fails=$((fails + 1))
        echo "FAIL: ipc probe-order: a group's early preparation failed:"
        grep -m2 "an early preparation failed" "$TMP/err"
    fi
    ;;
esac
if [ "$RINGLET_DEVICE" = sim ]; then
    # A communicator destroyed while the copies of a failed receive are still queued keeps
    # the CUDA IPC slots they read mapped (the simulator stops a process that unmaps them).
    # ringlet's warning that it left the slots shows the copies were queued at the destroy
    # (else the case would pass without reaching its state). The receive's error must say
    # that it waits on this rank's own device, not on rank 0 (whose data arrived), and the
    # destroy must make no call that would wait behind the program's kernel on a GPU (a
    # free: the simulator refuses it as a deadlock). Over shm the same with the chunks
    # staged through host memory.
    case " ${RINGLET_TEST_TRANSPORTS:-ipc} " in *" ipc "*)
        run_case ipc pending-copies RINGLET_TIMEOUT=3 CUDA_DEVICE_MAX_CONNECTIONS=1
        if ! grep -q "copies of rank 0's connection failed or were not finished" "$TMP/err"; then
            fails=$((fails + 1))
            echo "FAIL: ipc pending-copies: rank 1 did not warn that its copies were still queued at the destroy"
        fi
        # The failed receive waited for its copies until RINGLET_TIMEOUT (failed-copies below
        # shows the wait itself), then failed saying they may still write its buffer.
        if ! grep -q "device copies of failed requests receiving from rank 0 were not finished" "$TMP/err"; then
            fails=$((fails + 1))
            echo "FAIL: ipc pending-copies: rank 1 did not warn that its failed receive's copies were not finished"
        fi
        pending_checks ipc "[0-9]+ device cop(y|ies) out of its CUDA IPC slots (is|are) queued on this rank's device and not finished"
        ;;
    esac
    case " ${RINGLET_TEST_TRANSPORTS:-shm} " in *" shm "*)
        run_case shm pending-copies RINGLET_TIMEOUT=3 CUDA_DEVICE_MAX_CONNECTIONS=1
        pending_checks shm "this rank's own device copies of its chunks are not finished"
        ;;
    esac
    # A failed call returns once the device copies it queued into its buffer are done.
    case " ${RINGLET_TEST_TRANSPORTS:-ipc} " in *" ipc "*)
        run_case ipc failed-copies RINGLET_TRANSPORT=cuda_ipc RINGLET_TIMEOUT=5 CUDA_DEVICE_MAX_CONNECTIONS=1
        # A posted send or receive that times out says what it waits for, as a collective does.
        if ! grep -qE "failed-copies: the receive failed .*not done after 5 s \(RINGLET_TIMEOUT\): [0-9]+ device cop(y|ies) out of its CUDA IPC slots" "$TMP/out"; then
            fails=$((fails + 1))
            echo "FAIL: ipc failed-copies: rank 1's error does not say that its own device copies were not finished:"
            grep -m1 "failed-copies: the receive failed" "$TMP/out"
        fi
        # An abort waits for no device copy (RINGLET_TIMEOUT=600: one that did would outlast
        # the run's limit): the queued copies out of the CUDA IPC slots here, the staging
        # streams' copies over shm below.
        run_case ipc abort-copies RINGLET_TIMEOUT=600 CUDA_DEVICE_MAX_CONNECTIONS=1
        ;;
    esac
    case " ${RINGLET_TEST_TRANSPORTS:-shm} " in *" shm "*)
        run_case shm abort-copies RINGLET_TIMEOUT=600 CUDA_DEVICE_MAX_CONNECTIONS=1
        ;;
    esac
fi
# A failed preparation's call and the call taken with it (tests/mp/prep_pair.c, 3 ranks,
# the simulator): rank 0's queue held by construction while both are queued.
if [ "$RINGLET_DEVICE" = sim ]; then
    rm -rf "$TMP/d" && mkdir "$TMP/d"
    RINGLET_TIMEOUT=6 RINGLET_STREAM_HOLD=memop CUDA_DEVICE_MAX_CONNECTIONS=32 "$RUN" -n 3 --timeout 120 --grace 30 \
        "$BUILD/tests/mp/prep_pair" --dir "$TMP/d" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    if [ $rc = 0 ] && [ "$(grep -cE '^\[[012]\] prep_pair: rank [012]: OK' "$TMP/out")" = 3 ]; then
        echo "ok:   a stream call whose preparation failed, run with the call after it (3 ranks)"
        grep -E 'prep_pair: rank 0: OK' "$TMP/out" | sed 's/^/      /'
    else
        fails=$((fails + 1))
        echo "FAIL: a stream call whose preparation failed, run with the call after it: launcher exit status $rc"
        tail -n 30 "$TMP/out" "$TMP/err"
    fi
fi
[ $fails = 0 ] && { echo "stream: all passed"; exit 0; }
echo "stream: $fails failed"
exit 1

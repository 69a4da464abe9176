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
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-stream.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
COUNT=300007
case "${SANITIZE:-}" in *thread*) COUNT=30011 ;; esac
fails=0
for tr in ${RINGLET_TEST_TRANSPORTS:-ipc shm tcp}; do
    for cas in order abort async; do
        rm -rf "$TMP/d" && mkdir "$TMP/d"
        tenv="RINGLET_TRANSPORT=$tr"
        [ "$tr" = ipc ] && tenv="RINGLET_TRANSPORT=auto"
        env "$tenv" RINGLET_TIMEOUT=10 "$RUN" -n 2 --timeout 180 --grace 60 "$PROG" --case "$cas" \
            --count "$COUNT" --dir "$TMP/d" >"$TMP/out" 2>"$TMP/err"
        rc=$?
        if grep -q '^\[0\] SKIP' "$TMP/out"; then
            grep -m1 SKIP "$TMP/out" | sed 's/^\[0\] //'
            exit 77
        fi
        n=$(grep -cE "^\[[01]\] stream: rank [01]: OK $cas" "$TMP/out")
        if [ "$rc" = 0 ] && [ "$n" = 2 ]; then
            echo "ok:   $tr $cas"
            grep -E "OK $cas:" "$TMP/out" | sed 's/^/      /'
        else
            fails=$((fails + 1))
            echo "FAIL: $tr $cas: launcher exit status $rc, $n of 2 ranks OK"
            tail -n 30 "$TMP/out" "$TMP/err"
        fi
    done
done
[ $fails = 0 ] && { echo "stream: all passed"; exit 0; }
echo "stream: $fails failed"
exit 1

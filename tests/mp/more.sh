#!/usr/bin/env bash
# All-to-all, gather, scatter, groups, split and pre-multiplied sums (tests/mp/more.c)
# through ringlet-run at P = 1..4: on host memory over shm and tcp, and on device memory
# over the device layer's backend RINGLET_TEST_DEVICE (default sim, with
# RINGLET_SIM_JITTER=100 so that a missing stream wait shows) over cuda_ipc (auto), shm
# and tcp, and at P = 3 with RINGLET_TRANSPORT=cuda_ipc (every connection over it) (P = 4 with
# 2 simulated devices too), at P = 5
# with 2 and 3 device lanes (exchanges in rounds) over cuda_ipc (auto) and tcp, then
# host memory once more (shm, P = 2) with the device backend present.
# Exit 0 = all passed, 1 = a failure.
set -u
BUILD=${BUILD:-build}
RUN="$BUILD/bin/ringlet-run"
PROG="$BUILD/tests/mp/more"
for f in "$RUN" "$PROG"; do
    [ -x "$f" ] || { echo "FAIL: $f not found (build first, or set BUILD)"; exit 1; }
done
COUNT=100003
case "${SANITIZE:-}" in *thread*) COUNT=10007 ;; esac
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-more.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0
one() { # memory transport P
    local mem=$1 tr=$2 P=$3 tenv="RINGLET_TRANSPORT=$2"
    [ "$tr" = ipc ] && tenv="RINGLET_TRANSPORT=auto"
    env "$tenv" RINGLET_TIMEOUT=30 "$RUN" -n "$P" --timeout 300 --grace 30 "$PROG" --memory "$mem" \
        --count "$COUNT" --seed $((P * 31 + ${#tr})) >"$TMP/out" 2>"$TMP/err"
    local rc=$? n
    n=$(grep -cE "^\[[0-9]+\] more: rank [0-9]+ of $P: [1-9][0-9]* checks, 0 failed" "$TMP/out")
    if [ "$rc" = 0 ] && [ "$n" = "$P" ]; then
        echo "ok:   $mem $tr P=$P: $(grep -m1 -oE '[0-9]+ checks' "$TMP/out") per rank"
    else
        fails=$((fails + 1))
        echo "FAIL: $mem $tr P=$P: launcher exit status $rc, $n of $P ranks passed"
        tail -n 30 "$TMP/out" "$TMP/err"
    fi
}
for P in 1 2 3 4; do
    for tr in shm tcp; do one host "$tr" "$P"; done
done
export RINGLET_DEVICE=${RINGLET_TEST_DEVICE:-sim}
if [ "$RINGLET_DEVICE" = sim ]; then export RINGLET_SIM_JITTER=${RINGLET_SIM_JITTER:-100}; fi
for P in 1 2 3 4; do
    for tr in ipc shm tcp; do one device "$tr" "$P"; done
done
# every connection over cuda_ipc (host and device buffers take the same one)
one device cuda_ipc 3
# ... with 2 simulated devices, a host-buffer all-to-all first (its connections are made on
# the progress thread: on the communicator's device all the same)
[ "$RINGLET_DEVICE" = sim ] && RINGLET_SIM_DEVICES=2 one device cuda_ipc 4
# Device exchanges with more peers than lanes (at P = 5: RINGLET_DEVICE_LANES=2, distances
# 1-2, then 3-4, over cuda_ipc where it maps (auto); 3, distances 1-3, then 4, over tcp):
# every result right, and no lane past the last made (before, one lane per peer; past 64
# peers the call failed); with 3 lanes, a partner's send and receive share a round.
for run in "ipc 2" "tcp 3"; do
    set -- $run
    RINGLET_DEVICE_LANES=$2 RINGLET_DEBUG=INFO one device "$1" 5
    lanes=$(grep -oE "device staging lane [0-9]+ made" "$TMP/err" | sort -u | awk '{print $4}' | tr '\n' ' ')
    want=$(seq 0 $(($2 - 1)) | tr '\n' ' ')
    if [ "$lanes" = "$want" ]; then
        echo "ok:   device lanes $2 over $1 at P=5: lanes made: $lanes"
    else
        fails=$((fails + 1))
        echo "FAIL: device lanes $2 over $1 at P=5: lanes made: '$lanes', expected '$want'"
    fi
done
# Host buffers in a process with a device backend (as on a GPU machine): the communicator
# has the current device (ringlet_comm_device).
one host shm 2
[ $fails = 0 ] && { echo "more: all passed"; exit 0; }
echo "more: $fails failed"
exit 1

#!/usr/bin/env bash
# Many collectives queued on one stream between synchronisations (tests/mp/batch.c), on
# device memory through the device layer's backend RINGLET_TEST_DEVICE (default sim, with
# RINGLET_SIM_JITTER so that a missing stream wait shows; cuda on a GPU): batches of 64
# at P = 3 over TCP (the GPU suite's P = 3 "--batch 64" case that failed once), P = 2 over
# shared memory, and P = 4 over the default for device buffers on one host (cuda_ipc).
# Exit 0 = all passed, 1 = a failure.
set -u
BUILD=${BUILD:-build}
RUN="$BUILD/bin/ringlet-run"
PROG="$BUILD/tests/mp/batch"
for f in "$RUN" "$PROG"; do [ -x "$f" ] || { echo "FAIL: $f not found (build first)"; exit 1; }; done
export RINGLET_DEVICE=${RINGLET_TEST_DEVICE:-sim}
[ "$RINGLET_DEVICE" = sim ] && export RINGLET_SIM_JITTER=${RINGLET_SIM_JITTER:-50}
export RINGLET_TIMEOUT=${RINGLET_TIMEOUT:-60}
COUNT=1009
case "${SANITIZE:-}" in *thread*) COUNT=257 ;; esac
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-batch.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0
one() { # label P env... -- args...
    local label=$1 P=$2
    shift 2
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" "$RUN" -n "$P" --timeout 600 "$PROG" --count "$COUNT" "$@" >"$TMP/out" 2>&1
    local rc=$? n
    n=$(grep -cE "batch: rank [0-9]+ of $P: [1-9][0-9]* cases in [0-9]+ batches of up to [0-9]+, 0 failed" "$TMP/out")
    if [ $rc = 0 ] && [ "$n" = "$P" ]; then
        echo "ok:   $label: $(grep -m1 -oE '[0-9]+ cases in [0-9]+ batches of up to [0-9]+' "$TMP/out")"
    else
        fails=$((fails + 1))
        echo "FAIL: $label (exit $rc, $n of $P ranks passed)"
        tail -n 30 "$TMP/out"
    fi
}
one "P=3 tcp, batches of 64" 3 RINGLET_TRANSPORT=tcp -- --batch 64
one "P=2 shm, batches of 64" 2 RINGLET_TRANSPORT=shm -- --batch 64
one "P=4 default transport (cuda_ipc), batches of 64" 4 RINGLET_DEBUG=WARN -- --batch 64
[ $fails = 0 ] && { echo "batch: all passed"; exit 0; }
echo "batch: $fails failed"
exit 1

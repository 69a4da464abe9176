#!/usr/bin/env bash
# Communicators that come and go beside live ones (tests/mp/churn.c, issue 22): each rank
# holds a world communicator and up to 3 more, with inits, destroys and aborts (by every
# rank, or by one while the others wait for their copy to fail, naming it) drawn at random
# (the same schedule on every rank), some of them while a non-blocking collective runs on
# another communicator; every collective's result is checked, and any failure but the
# aborted communicator's own fails the run. Runs:
#   shm P=3 and P=8, tcp P=4 and P=6 (host memory); simulated device memory
#   (RINGLET_DEVICE=sim, jitter) at P=3 with the default transports (cuda_ipc for device
#   buffers, shm for host) and at P=5 over tcp; and the loop of the issue (unique id over
#   the world, init, all-reduce, abort, barrier on the world) at P=3 over shm and P=4 over tcp.
# CHURN_CYCLES per run (default 400; 200 under AddressSanitizer, 120 under ThreadSanitizer;
# device runs and the issue's loop half as many). The seed is CHURN_SEED (default random),
# printed with a replay command on a failure. Every wait has a deadline (RINGLET_TIMEOUT 60 s,
# the launcher's --timeout). Exit 0 = passed, 1 = failed.
set -u
BUILD=${BUILD:-build}
RUN="$BUILD/bin/ringlet-run"
PROG="$BUILD/tests/mp/churn"
for f in "$RUN" "$PROG"; do [ -x "$f" ] || { echo "FAIL: $f not found (build first)"; exit 1; }; done
case "${SANITIZE:-}" in
"") N=${CHURN_CYCLES:-400} ;;
*thread*) N=${CHURN_CYCLES:-120} ;;
*) N=${CHURN_CYCLES:-200} ;;
esac
H=$(((N + 1) / 2))
SEED=${CHURN_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
export RINGLET_TIMEOUT=60
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-churn.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
echo "churn: seed $SEED, $N cycles per run${SANITIZE:+ (SANITIZE=$SANITIZE)}"
fails=0 k=0
# name|P|environment|arguments
PLAN="shm host|3|RINGLET_TRANSPORT=shm|--cycles $N
shm host|8|RINGLET_TRANSPORT=shm|--cycles $N
tcp host|4|RINGLET_TRANSPORT=tcp|--cycles $N
tcp host|6|RINGLET_TRANSPORT=tcp|--cycles $N
sim device, default transports|3|RINGLET_DEVICE=sim RINGLET_SIM_JITTER=20|--cycles $H --memory device
sim device over tcp|5|RINGLET_DEVICE=sim RINGLET_TRANSPORT=tcp|--cycles $H --memory device
issue 22's loop over shm|3|RINGLET_TRANSPORT=shm|--scenario $H
issue 22's loop over tcp|4|RINGLET_TRANSPORT=tcp|--scenario $H"
while IFS='|' read -r name P envs args; do
    seed=$((SEED + k))
    k=$((k + 1))
    t=$SECONDS
    # shellcheck disable=SC2086
    env $envs "$RUN" -n "$P" --timeout 600 --grace 10 "$PROG" $args --seed "$seed" >"$TMP/out" 2>&1
    rc=$?
    good=$(grep -cE "^\[[0-9]+\] churn: rank [0-9]+: OK" "$TMP/out")
    if [ $rc = 0 ] && [ "$good" = "$P" ]; then
        echo "ok:   $name P=$P ($((SECONDS - t)) s): $(sed -n 's/^\[0\] churn: rank 0: OK //p' "$TMP/out")"
    else
        fails=$((fails + 1))
        echo "FAIL: $name P=$P: launcher exit status $rc, $good of $P ranks passed ($((SECONDS - t)) s)"
        echo "      replay: $envs RINGLET_TIMEOUT=$RINGLET_TIMEOUT $RUN -n $P $PROG $args --seed $seed"
        grep -E 'FAIL|ringlet-run' "$TMP/out" | head -n 20
        echo "----- last lines:"
        tail -n 15 "$TMP/out"
        echo "-----"
    fi
done <<<"$PLAN"
[ $fails = 0 ] && { echo "churn: all passed"; exit 0; }
echo "churn: $fails runs failed"
exit 1

#!/usr/bin/env bash
# Soak: random collectives over two communicators at once, every result checked
# (tests/mp/soak.c), for SOAK_SECONDS in all (default 90; 30 in sanitizer builds), split
# over three runs through ringlet-run:
#   1. P=4 on host memory over shared memory (weight 2 of 4; the split communicator is
#      two communicators of 2 ranks);
#   2. P=3 on host memory over TCP with RINGLET_CHECK=1 (weight 1; every collective's
#      fingerprint compared across ranks; the split communicator has all 3 ranks);
#   3. P=3 on host and simulated device memory (RINGLET_DEVICE=sim, RINGLET_SIM_JITTER)
#      with the default transports: device buffers over cuda_ipc, host buffers over shm
#      (weight 1). Each run gets its weight's share of the time left.
# Largest buffer per operation (--max-bytes): 64 MiB on host and 8 MiB on device memory in
# the normal build; 16 MiB / 2 MiB under AddressSanitizer; 1 MiB / 256 KiB under
# ThreadSanitizer. A round's buffers total at most 3x that per rank.
# The seed is SOAK_SEED (default: random), printed; run k uses SOAK_SEED + k. A failure
# prints the seed, round and slot and the command that replays it.
# Every wait in the library has a deadline (RINGLET_TIMEOUT, 120 s here) and the launcher
# stops a run that outlives its share by 300 s. Exit 0 = all passed, 1 = a failure.
set -u
BUILD=${BUILD:-build}
RUN="$BUILD/bin/ringlet-run"
PROG="$BUILD/tests/mp/soak"
for f in "$RUN" "$PROG"; do
    [ -x "$f" ] || { echo "FAIL: $f not found (build first, or set BUILD)"; exit 1; }
done
case "${SANITIZE:-}" in
"") SECONDS_ALL=${SOAK_SECONDS:-90} MAXB=64M DMAXB=8M ;;
*thread*) SECONDS_ALL=${SOAK_SECONDS:-30} MAXB=1M DMAXB=256K ;;
*) SECONDS_ALL=${SOAK_SECONDS:-30} MAXB=16M DMAXB=2M ;;
esac
SEED=${SOAK_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
export RINGLET_TIMEOUT=${RINGLET_TIMEOUT:-120}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-soak.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# name|P|weight|environment|arguments. Each run gets its weight's share of the time left,
# so a run that went over its share (the round under way is finished) shortens the next.
PLAN="shm host|4|2|RINGLET_TRANSPORT=shm|--max-bytes $MAXB --memory host
tcp host|3|1|RINGLET_TRANSPORT=tcp RINGLET_CHECK=1|--max-bytes $MAXB --memory host
sim device+host|3|1|RINGLET_DEVICE=sim RINGLET_SIM_JITTER=20|--max-bytes $DMAXB --memory mixed"
weights_left=4
t_end=$((SECONDS + SECONDS_ALL))

echo "soak: seed $SEED, $SECONDS_ALL s in all, build $BUILD${SANITIZE:+ (SANITIZE=$SANITIZE)}"
fails=0 k=0 t_all=$SECONDS
while IFS='|' read -r name P weight envs args; do
    secs=$(((t_end - SECONDS) * weight / weights_left))
    [ "$secs" -lt 1 ] && secs=1
    weights_left=$((weights_left - weight))
    seed=$((SEED + k))
    k=$((k + 1))
    t=$SECONDS
    # shellcheck disable=SC2086
    env $envs "$RUN" -n "$P" --timeout $((secs + 300)) --grace 10 "$PROG" --seed "$seed" --seconds "$secs" \
        $args >"$TMP/out" 2>"$TMP/err"
    rc=$?
    good=$(grep -cE "^\[[0-9]+\] soak: rank [0-9]+ of $P: .* 0 failures " "$TMP/out")
    if [ "$rc" = 0 ] && [ "$good" = "$P" ]; then
        echo "ok:   $name P=$P ($((SECONDS - t)) s): $(sed -n 's/^\[0\] soak: rank 0 of [0-9]*: //p' "$TMP/out")"
    else
        fails=$((fails + 1))
        echo "FAIL: $name P=$P seed $seed: launcher exit status $rc, $good of $P ranks passed ($((SECONDS - t)) s)"
        echo "      replay: $envs RINGLET_TIMEOUT=$RINGLET_TIMEOUT $RUN -n $P $PROG --seed $seed --seconds $secs $args"
        grep -E 'FAIL|replay|soak: rank' "$TMP/out" | head -n 40
        echo "----- last lines of stderr:"
        tail -n 20 "$TMP/err"
        echo "-----"
    fi
done <<<"$PLAN"
if [ $fails = 0 ]; then
    echo "soak: all passed ($((SECONDS - t_all)) s)"
    exit 0
fi
echo "soak: $fails runs failed ($((SECONDS - t_all)) s)"
exit 1

#!/usr/bin/env bash
# The C DDP layer (include/ringlet_ddp.h): tests/mp/ddp.c at P = 1, 2, 3, 4 through
# ringlet-run, then the C example examples/ddp_mlp.c (small sizes).
#
# tests/mp/ddp.c checks, on every rank: rank 0's parameters and buffers everywhere after
# create; the bucket assignment (reverse registration order, caps, >= 4 buckets);
# averaged gradients after finish, with buckets launched before finish (reverse and
# random report orders); buffers broadcast before forwards; gradient_as_bucket_view;
# no_sync accumulation (and PyTorch's buffer-broadcast rule in a no_sync block);
# average_gradients = 0; float16/bfloat16 compression; find_unused_parameters; and the
# errors: different shapes/dtypes/counts/options or an argument error on one rank at
# create (the same message on every rank, naming the first difference), device memory
# without a device backend or mixed with host memory,
# a gradient reported twice and a parameter without gradient (on every rank or on one:
# the others fail too), calls out of order.
# Runs: P=2 with --big (an 8 MiB parameter: the broadcast's direct path, and a gradient
# all-reduced in place), P=3 with RINGLET_DDP_BCAST_BYTES=512 (many coalesced broadcast
# messages, slot reuse), P=3 with RINGLET_DDP_DIRECT_BYTES=64 (nearly every gradient
# all-reduced in place rather than copied into its bucket).
# The same runs again with every tensor in device memory (--memory device) over the
# device layer's backend RINGLET_TEST_DEVICE (default sim: the simulated GPU, with
# RINGLET_SIM_JITTER=100 so that a missing stream order shows): buckets, staging and
# every copy, conversion and collective on device memory and the default stream; the P=4
# device run with streams held (RINGLET_STREAM_HOLD=memop: the scenario nowait needs it;
# with a hardware queue per stream, CUDA_DEVICE_MAX_CONNECTIONS=32, as a hold needs).
# Sanitizer builds (SANITIZE set): the same runs (--big under address sanitizer only, on
# host memory: the simulated device's copies of it took 20 s there).
# Takes a few seconds (normal build). Exit 0 = all passed, 1 = a failure.
set -u

BUILD=${BUILD:-build}
RUN="$BUILD/bin/ringlet-run"
PROG="$BUILD/tests/mp/ddp"
EX="$BUILD/examples/ddp_mlp"
for f in "$RUN" "$PROG" "$EX"; do
    if [ ! -x "$f" ]; then
        echo "FAIL: $f not found (build first, or set BUILD)"
        exit 1
    fi
done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-ddp.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export RINGLET_TIMEOUT=${RINGLET_TIMEOUT:-60}
SAN=${SANITIZE:-}
BIG="--big" DBIG="--big"
case "$SAN" in *thread*) BIG="" DBIG="" ;; ?*) DBIG="" ;; esac

fails=0
now_ms() { echo $(($(date +%s%N) / 1000000)); }
t_all=$(now_ms)
# P|environment|arguments
DEV="RINGLET_DEVICE=${RINGLET_TEST_DEVICE:-sim} RINGLET_SIM_JITTER=${RINGLET_SIM_JITTER:-100}"
PLAN="1||
2||$BIG
3|RINGLET_DDP_BCAST_BYTES=512|
3|RINGLET_DDP_DIRECT_BYTES=64|
4||
1|$DEV|--memory device
2|$DEV|--memory device $DBIG
3|$DEV RINGLET_DDP_BCAST_BYTES=512 RINGLET_SIM_DEVICES=2|--memory device
3|$DEV RINGLET_DDP_DIRECT_BYTES=64|--memory device
4|$DEV RINGLET_STREAM_HOLD=memop CUDA_DEVICE_MAX_CONNECTIONS=32|--memory device"
while IFS='|' read -r P envs args; do
    [ -n "$P" ] || continue
    t=$(now_ms)
    # shellcheck disable=SC2086
    env $envs "$RUN" -n "$P" --timeout 600 "$PROG" $args >"$TMP/out" 2>"$TMP/err"
    rc=$?
    dt=$(($(now_ms) - t))
    good=$(grep -cE "^\[[0-9]+\] ddp: rank [0-9]+ of $P: [1-9][0-9]* checks, 0 failed" "$TMP/out")
    checks=$(sed -n "s/^\[0\] ddp: rank 0 of $P: \([0-9]*\) checks.*/\1/p" "$TMP/out")
    name="P=$P${args:+ $args}${envs:+ ($envs)}"
    if [ "$rc" = 0 ] && [ "$good" = "$P" ]; then
        echo "ok:   ddp $name: ${checks:-?} checks per rank, $((dt / 1000)).$((dt % 1000 / 100)) s"
    else
        fails=$((fails + 1))
        echo "FAIL: ddp $name: launcher exit status $rc, $good of $P ranks passed"
        grep -E 'FAIL|checks' "$TMP/out" | head -n 60
        echo "----- last lines of stderr:"
        tail -n 20 "$TMP/err"
        echo "-----"
    fi
done <<<"$PLAN"
# the messages every rank got for the misuse cases (P=4 run)
grep -E '^\[0\] ddp: (.* -> |misuse)' "$TMP/out" | sed 's/^/      /'

# the C example
for args in "-n 3|--steps 60" "-n 2|--steps 30 --view"; do
    IFS='|' read -r n a <<<"$args"
    # shellcheck disable=SC2086
    "$RUN" $n --timeout 600 "$EX" $a >"$TMP/ex" 2>&1
    rc=$?
    if [ $rc = 0 ] && grep -q "weights identical on all .* ranks: yes" "$TMP/ex"; then
        echo "ok:   examples/ddp_mlp $n $a: $(sed -n 's/^\[0\] ddp_mlp: rank 0: //p' "$TMP/ex")"
    else
        fails=$((fails + 1))
        echo "FAIL: examples/ddp_mlp $n $a: exit status $rc"
        tail -n 30 "$TMP/ex"
    fi
done

dt=$(($(now_ms) - t_all))
if [ $fails = 0 ]; then
    echo "ddp: all passed ($((dt / 1000)) s)"
    exit 0
fi
echo "ddp: $fails runs failed ($((dt / 1000)) s)"
exit 1

#!/usr/bin/env bash
# The GPU suite's shape, checked where there is no GPU (tests/gpu/run.sh, tests/gpu/README.md):
#   1. --list: the quick tier's budgets sum to <= 360 s and every group's to <= 480 s (the
#      sums recomputed from the step lines, and equal to the totals --list states); groups are
#      numbered 1..N; in every tier a step that needs the build comes after the build step;
#      the quick tier has the steps issue 21 names; every step of the suite before the split
#      is still in some tier (device-collectives and ddp-cuda as their parts), host-suite in
#      none; the benchmarks only in groups after every group of tests;
#   2. every step --list names is accepted by --steps (--dry-run), an unknown step or group is
#      refused (exit 2);
#   3. a --steps run with no GPU (RINGLET_GPU_NONE=1) into a temporary RINGLET_GPU_OUT: the GPU
#      steps skip, preflight skips saying why, selftest-hang is stopped within its 3 s budget
#      (FAIL, timed out) with its child and grandchild gone, and the steps after it still run;
#      results.txt holds one result line per step, in order, with log tails, and ends with
#      "0 passed, 1 failed, 4 skipped", as summary.txt does; the exit status is 1.
# Writes only under a temporary folder and $BUILD/tests/gpu/logs. Takes a few seconds.
# Exit 0 = passed, 1 = failed.
set -u
cd "$(dirname "$0")/../.." || exit 1
export BUILD=${BUILD:-build}
RUN=tests/gpu/run.sh
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-gpu-suite.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# ---- 1. the tiers
if ! bash $RUN --list >"$TMP/list" 2>&1; then
    fail "$RUN --list exit status $?"
    cat "$TMP/list"
    exit 1
fi
# tier lines: "<title>: N s of budgets (limit L s)"; step lines: "  name  B s  [needs]  what"
awk -v out="$TMP" '
    /^[^ ].*: [0-9]+ s of budgets \(limit [0-9]+ s\)$/ {
        tier = $0; sub(/:.*/, "", tier); stated = $0; sub(/.*: /, "", stated); split(stated, a, " ")
        match($0, /limit [0-9]+/); limit = substr($0, RSTART + 6, RLENGTH - 6)
        printf "%s|%d|%d\n", tier, a[1], limit > (out "/tiers"); cur = tier; next }
    /^[^ ]/ { cur = "(none)"; next }
    /^  [^ ]/ { needs = $4; gsub(/[][]/, "", needs); printf "%s|%s|%d|%s\n", cur, $1, $2, needs > (out "/steps") }
' "$TMP/list"
[ -s "$TMP/tiers" ] && [ -s "$TMP/steps" ] || { fail "--list: no tiers or steps read"; cat "$TMP/list"; exit 1; }
ngroups=0 quick_seen=0
while IFS='|' read -r tier stated limit; do
    sum=$(awk -F'|' -v t="$tier" '$1 == t {s += $3} END {print s + 0}' "$TMP/steps")
    [ "$sum" = "$stated" ] || fail "$tier: --list states $stated s, its steps sum to $sum s"
    case $tier in
    quick*) quick_seen=1; max=360 ;;
    "group "*) ngroups=$((ngroups + 1)); max=480
        [[ $tier == "group $ngroups "* ]] || fail "groups are not numbered 1..N: '$tier' is group number $ngroups" ;;
    *) fail "unknown tier '$tier'"; continue ;;
    esac
    [ "$limit" = "$max" ] || fail "$tier: --list states a limit of $limit s, not $max s"
    if [ "$sum" -le "$max" ]; then
        echo "ok:   $tier: $sum s of budgets (<= $max s)"
    else
        fail "$tier: $sum s of budgets, more than $max s"
    fi
    # within the tier: the build before every step that needs it
    awk -F'|' -v t="$tier" '$1 == t {
        if ($2 == "build") built = 1
        else if ($4 ~ /(^|,)build(,|$)/ && !built) print $2 }' "$TMP/steps" >"$TMP/early"
    [ -s "$TMP/early" ] && fail "$tier: needs the build before its build step: $(tr '\n' ' ' <"$TMP/early")"
done <"$TMP/tiers"
[ $quick_seen = 1 ] || fail "--list shows no quick tier"
[ $ngroups -ge 1 ] || fail "--list shows no group"

tier_of() { awk -F'|' -v s="$1" '$2 == s {print $1}' "$TMP/steps"; }
in_quick() { tier_of "$1" | grep -q '^quick'; }
for s in preflight build test_kernels-quick collectives-p2-ipc collectives-p2-shm stream-p2 torch-nccl-p2 ipc-p4 \
    ipc-p4-mps bench; do
    in_quick "$s" || fail "the quick tier lacks $s"
done
# the steps of the suite before the split (tests/gpu/run.sh at cb620c0), each in some tier
for s in test_kernels memcheck device-collectives device-stream device-batch device-ipc-p8 device-mps \
    device-memcheck device-more device-nccl device-ddp torch-nccl ddp-cuda ddp-bench bench device-bench ipc-bench \
    tcp-bench; do
    if ! awk -F'|' -v s="$s" '$1 != "(none)" && ($2 == s || index($2, s "-") == 1) {f = 1} END {exit !f}' "$TMP/steps"; then
        fail "step $s (or its parts $s-*) is in no tier"
    fi
done
[ "$(tier_of host-suite)" = "(none)" ] || fail "host-suite should be in no tier (tests/gpu/README.md says why)"
[ "$(tier_of nccl-tests | grep -c '^group')" -ge 1 ] || fail "nccl-tests is in no group"
# benchmarks last: no group of tests after the first group with a benchmark
awk -F'|' '$1 ~ /^group / {
        g = $1; sub(/^group /, "", g); sub(/ .*/, "", g); g += 0
        if ($2 == "bench" || $2 ~ /-bench(-|$)/ || $2 == "nccl-tests") { if (!fb || g < fb) fb = g }
        else if ($2 != "preflight" && $2 != "build" && g > lt) lt = g }
    END { if (fb && lt >= fb) printf "group %d has tests, after group %d with a benchmark\n", lt, fb }' \
    "$TMP/steps" >"$TMP/order"
[ -s "$TMP/order" ] && fail "benchmarks are not last: $(cat "$TMP/order")"
[ $fails = 0 ] && echo "ok:   tiers: quick has issue 21's steps; every step of the old suite is in a tier; benchmarks last"

# ---- 2. every step by name
all=$(awk -F'|' '{print $2}' "$TMP/steps" | sort -u | tr '\n' ',' | sed 's/,$//')
if bash $RUN --dry-run --steps "$all" >"$TMP/dry" 2>&1; then
    missing=""
    for s in ${all//,/ }; do grep -q "^$s " "$TMP/dry" || missing+=" $s"; done
    [ -z "$missing" ] || fail "--dry-run --steps leaves out:$missing"
    [ -z "$missing" ] && echo "ok:   --steps accepts all $(wc -w <<<"${all//,/ }") steps --list names"
else
    fail "--dry-run --steps (every step) exit status $?:"
    cat "$TMP/dry"
fi
for bad in "--steps no-such-step" "--group 0" "--group $((ngroups + 1))" "--no-such-option"; do
    # shellcheck disable=SC2086
    bash $RUN --dry-run $bad >/dev/null 2>&1
    rc=$?
    [ $rc = 2 ] || fail "run.sh $bad: exit status $rc, expected 2"
done
for g in $(seq 1 $ngroups); do
    bash $RUN --dry-run --group "$g" >"$TMP/g" 2>&1 || fail "--dry-run --group $g failed"
done
# A rerun of failed steps builds first even where build/ has the outputs (a warm machine keeps
# them; the fix being tested is newer): a stand-in nvidia-smi that lists a GPU, so that the
# GPU steps count as runnable.
mkdir -p "$TMP/fakebin"
printf '#!/bin/sh\necho "NVIDIA H100 80GB HBM3, 580.00, 81559 MiB"\n' >"$TMP/fakebin/nvidia-smi"
chmod +x "$TMP/fakebin/nvidia-smi"
PATH="$TMP/fakebin:$PATH" bash $RUN --dry-run --steps collectives-p2-ipc >"$TMP/dry" 2>&1
first=$(awk 'NR == 1 {print $1}' "$TMP/dry")
if [ "$first" = build ] && grep -q '^collectives-p2-ipc ' "$TMP/dry"; then
    echo "ok:   --steps collectives-p2-ipc with a GPU listed runs the build first$([ -x "$BUILD/bin/ringlet-run" ] && echo ", also with $BUILD built")"
else
    fail "--steps collectives-p2-ipc with a GPU listed: the build is not its first step:"
    cat "$TMP/dry"
fi

# ---- 3. a run without a GPU: results as each step ends, a hang costs its step only
OUT="$TMP/out"
mark="$((3000 + $$ % 997)).25" # a sleep length no other process has
t0=$SECONDS
RINGLET_GPU_NONE=1 RINGLET_GPU_OUT="$OUT" RINGLET_GPU_SELFTEST_SLEEP=$mark \
    bash $RUN --steps preflight,collectives-p2-ipc,selftest-hang,ipc-p4-mps,bench >"$TMP/run" 2>&1
rc=$?
dt=$((SECONDS - t0))
[ $rc = 1 ] || fail "the --steps run: exit status $rc, expected 1 (selftest-hang failed)"
[ $dt -le 30 ] || fail "the --steps run took $dt s (selftest-hang's budget is 3 s)"
if pgrep -f "sleep $mark" >/dev/null 2>&1; then
    fail "selftest-hang's sleeps outlived its timeout: $(pgrep -af "sleep $mark" | head -n 3)"
fi
R="$OUT/results.txt" S="$OUT/summary.txt"
if [ ! -s "$R" ] || [ ! -s "$S" ]; then
    fail "no $R or $S"
    cat "$TMP/run"
else
    grep -E '^(PASS|FAIL|SKIP) ' "$R" | awk '{print $1, $2}' >"$TMP/lines"
    printf '%s\n' "SKIP preflight" "SKIP collectives-p2-ipc" "FAIL selftest-hang" "SKIP ipc-p4-mps" "SKIP bench" >"$TMP/want"
    diff "$TMP/want" "$TMP/lines" >/dev/null || { fail "results.txt's step lines:"; cat "$R"; }
    grep -q '^FAIL selftest-hang .*timed out after 3s' "$R" || fail "results.txt does not say selftest-hang timed out"
    took=$(sed -n 's/^FAIL selftest-hang *\([0-9]*\)s of .*/\1/p' "$R")
    # whole seconds (run.sh's $SECONDS), and the failure's report after the stop: 2 s of slack
    [ -n "$took" ] && [ "$took" -le 5 ] || fail "selftest-hang took '${took}' s, more than its 3 s budget and 2 s"
    grep -q '^SKIP preflight .*no GPU' "$R" || fail "results.txt does not say why preflight skipped"
    grep -q '| selftest-hang: sleeping past the budget' "$R" || fail "results.txt lacks the tail of selftest-hang's log"
    last=$(tail -n 1 "$R")
    [ "$last" = "0 passed, 1 failed, 4 skipped" ] || fail "results.txt ends with '$last'"
    [ "$(tail -n 1 "$S")" = "0 passed, 1 failed, 4 skipped" ] || fail "summary.txt ends with '$(tail -n 1 "$S")'"
    nfiles=$(find "$OUT" -type f | wc -l)
    [ "$nfiles" -le 8 ] || fail "$nfiles files in RINGLET_GPU_OUT (the device tool brings back 8)"
    [ $fails = 0 ] && echo "ok:   --steps without a GPU ($dt s): $(tr '\n' ';' <"$TMP/lines" | sed 's/;$//'); results.txt ends '$last'; $nfiles files out"
fi
[ $fails = 0 ] && { echo "gpu_suite: all passed"; exit 0; }
echo "gpu_suite: $fails failed"
exit 1

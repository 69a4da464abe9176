#!/usr/bin/env bash
# Runs the suite: every unit test binary ($BUILD/tests/unit/test_*) and every
# multi-process script (tests/mp/*.sh, which launch ranks through ringlet-run).
# Exit status 0 = passed, 77 = skipped (with the reason on its output), else failed.
# Closes with "N passed, N failed, N skipped"; exits non-zero if anything failed.
# Tests write only under the build folder or a temporary folder: in a git checkout, the
# suite fails ("clean-tree") when `git status --porcelain` differs at the end from what it
# was at the start (a file a test wrote into the source tree, or one it changed).
#   TESTS="collectives args" tests/run.sh   runs only the named tests (a name that is no test fails)
# A passing test that left a part out says so in its log ("skip: ..." or "note: ..."): those
# lines are shown under its PASS line.
# Each test has TEST_LIMIT seconds (default 900; the longest takes about 220 s on CI's
# 2 cores): past them it is killed and fails, so that a test that hangs cannot stall CI.
set -u
cd "$(dirname "$0")/.."
export BUILD="${BUILD:-build}"
# A call the simulated GPU refuses because it would hang on a GPU ends the process (as
# strict as the hang: no caller can take it as a warning); test_simrules, which checks the
# refusals themselves, sets its own.
export RINGLET_SIM_ON_DEADLOCK="${RINGLET_SIM_ON_DEADLOCK:-exit}"
# ringlet reads NCCL's names of the variables it mirrors where its own are unset (README,
# Environment variables): a machine's NCCL settings must not change what the suite tests.
unset NCCL_SOCKET_IFNAME NCCL_IB_HCA NCCL_IB_DISABLE NCCL_SHM_DISABLE NCCL_P2P_DISABLE NCCL_IB_TIMEOUT \
    NCCL_IB_RETRY_CNT NCCL_IB_SL NCCL_IB_TC
# Python would write __pycache__ next to the sources it imports (python/, tests/python/).
export PYTHONDONTWRITEBYTECODE=1
TEST_LIMIT=${TEST_LIMIT:-900}
logdir="$BUILD/test-logs"
mkdir -p "$logdir"
tree_before=""
git_tree=0
if command -v git >/dev/null 2>&1 && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git_tree=1
    tree_before=$(git status --porcelain --untracked-files=all 2>&1)
fi
pass=0 fail=0 skip=0 failed_names=()
# A test runs in a process group of its own (timeout's), which a terminal's Ctrl-C does not
# reach: the signal is passed on to it, and the suite stops after it.
interrupted=0 cur=""
on_signal() { interrupted=1; [ -n "$cur" ] && kill -TERM "$cur" 2>/dev/null; }
trap on_signal INT TERM
run_one() { # name command...
    local name=$1; shift
    if [ -n "${TESTS:-}" ] && ! grep -qw -- "$name" <<<"$TESTS"; then return; fi
    local log="$logdir/$name.log" t0=$SECONDS rc
    timeout -k 10 "$TEST_LIMIT" "$@" >"$log" 2>&1 </dev/null &
    cur=$!
    wait "$cur"
    rc=$?
    while kill -0 "$cur" 2>/dev/null; do wait "$cur"; rc=$?; done # a signal's trap ended the wait early
    cur=""
    local dt=$((SECONDS - t0))
    if { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && [ $dt -ge "$TEST_LIMIT" ]; then
        echo "run.sh: killed after TEST_LIMIT=$TEST_LIMIT s" >>"$log"
    fi
    if [ $rc -eq 0 ]; then
        pass=$((pass + 1)); printf 'PASS  %-28s %4ds\n' "$name" "$dt"
        # Parts a passing test left out (its "skip:" and "note:" lines), shown here too
        grep -hE '^(\[[0-9]+\] )?(skip|note): ' "$log" | head -n 5 | sed 's/^/      part not run: /'
    elif [ $rc -eq 77 ]; then
        skip=$((skip + 1)); printf 'SKIP  %-28s %4ds  %s\n' "$name" "$dt" "$(grep -m1 -i skip "$log")"
    else
        fail=$((fail + 1)); failed_names+=("$name")
        printf 'FAIL  %-28s %4ds  (exit %d, log %s)\n' "$name" "$dt" "$rc" "$log"
        # The log's own FAIL lines first (a long log's tail may not reach them), then its tail
        grep -hE '^(\[[0-9]+\] )?FAIL' "$log" | head -n 8 | cut -c1-400 | sed 's/^/    first FAIL lines: /'
        tail -n 40 "$log" | sed 's/^/    | /'
    fi
    if [ $interrupted = 1 ]; then
        echo "run.sh: interrupted"
        exit 130
    fi
}
# Every unit test is one tests/unit/test_*.c: one whose binary the build lacks fails
# (a build that dropped it must not drop the test silently).
known=()
for src in tests/unit/test_*.c; do
    name=$(basename "$src" .c)
    known+=("$name")
    if [ -x "$BUILD/tests/unit/$name" ]; then
        run_one "$name" "$BUILD/tests/unit/$name"
    else
        run_one "$name" sh -c "echo 'no binary $BUILD/tests/unit/$name (build first: make)'; exit 1"
    fi
done
for s in tests/mp/*.sh; do
    known+=("$(basename "$s" .sh)")
    run_one "$(basename "$s" .sh)" bash "$s"
done
# A name in TESTS that is no test (a typo) fails, rather than run nothing and pass.
for want in ${TESTS:-}; do
    if ! printf '%s\n' "${known[@]}" | grep -qxF -- "$want"; then
        fail=$((fail + 1)); failed_names+=("$want")
        printf 'FAIL  %-28s %4ds  (no such test: not tests/unit/%s.c nor tests/mp/%s.sh)\n' "$want" 0 "$want" "$want"
    fi
done
if [ $git_tree = 1 ]; then
    tree_after=$(git status --porcelain --untracked-files=all 2>&1)
    if [ "$tree_after" = "$tree_before" ]; then
        pass=$((pass + 1)); printf 'PASS  %-28s %4ds  (git status --porcelain as before)\n' clean-tree 0
    else
        fail=$((fail + 1)); failed_names+=(clean-tree)
        printf 'FAIL  %-28s %4ds  (the tests changed the source tree: git status --porcelain)\n' clean-tree 0
        diff <(echo "$tree_before") <(echo "$tree_after") | sed -n 's/^[<>] /    | /p'
    fi
fi
[ ${#failed_names[@]} -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]

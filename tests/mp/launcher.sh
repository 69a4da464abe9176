#!/usr/bin/env bash
# Test of ringlet-run, the local launcher. Exit 0 when every case passes, 1 otherwise.
# The launcher is taken from "$BUILD/bin/ringlet-run" (BUILD defaults to "build").
# Takes about 25 s.
set -u

BUILD=${BUILD:-build}
RUN="$BUILD/bin/ringlet-run"
if [ ! -x "$RUN" ]; then
    echo "FAIL: launcher not found at $RUN (build it first, or set BUILD)"
    exit 1
fi
case "$RUN" in /*) ;; *) RUN="$PWD/$RUN" ;; esac

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-launcher.XXXXXX")
# every rank of this test carries MARK in its command line, so leftovers can be found
MARK="ringlet_launcher_test_$$_$RANDOM"
# shellcheck disable=SC2317,SC2086  # called from the trap; $pids is a list
cleanup() {
    local pids
    pids=$(leftovers)
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "ok:   $*"; }
# the launcher under a watchdog, so that a launcher that hangs fails the test (137) instead of hanging it
# (60 s: only a hang, never a slow sanitizer build, reaches it)
L() {
    if command -v timeout >/dev/null 2>&1; then
        timeout -s KILL 60 "$RUN" "$@"
    else
        "$RUN" "$@"
    fi
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# processes still running with MARK in their command line
leftovers() {
    if command -v pgrep >/dev/null 2>&1; then
        pgrep -f "$MARK" | grep -vx "$$" || true
    else
        grep -l -a -- "$MARK" /proc/[0-9]*/cmdline 2>/dev/null | sed 's|/proc/||; s|/cmdline||' |
            grep -vx -e "$$" -e self || true
    fi
}
# wait (20 s at most) until files $2.0 .. $2.($1 - 1) exist in $TMP: ranks that got that far
wait_files() {
    local n=$1 prefix=$2 k=0 r
    while [ $k -lt 400 ]; do
        for ((r = 0; r < n; r++)); do [ -e "$TMP/$prefix.$r" ] || break; done
        [ "$r" = "$n" ] && return 0
        sleep 0.05; k=$((k + 1))
    done
    return 1
}
# wait (20 s at most) for the background process $1 to end; its exit status, or 137 after a SIGKILL
wait_bounded() {
    local k=0
    while kill -0 "$1" 2>/dev/null && [ $k -lt 400 ]; do sleep 0.05; k=$((k + 1)); done
    kill -0 "$1" 2>/dev/null && kill -KILL "$1" 2>/dev/null
    wait "$1"
}
# wait up to 1 s for leftovers to disappear (a SIGKILLed process can take a moment to be reaped)
no_leftovers() {
    local _
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        [ -z "$(leftovers)" ] && return 0
        sleep 0.1
    done
    return 1
}

# The rank program: rank.sh MODE MARK
cat >"$TMP/rank.sh" <<'EOF'
#!/usr/bin/env bash
mode=$1
dir=$(dirname "$0")
loop() { while :; do sleep 0.1; done; }
case "$mode" in
env)
    echo "rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK lws=$LOCAL_WORLD_SIZE group=$GROUP_RANK" \
         "addr=$MASTER_ADDR port=$MASTER_PORT secret=$RINGLET_SECRET"
    echo "to-stderr $RANK" >&2
    ;;
fail3)   [ "$RANK" = 1 ] && exit 3; loop ;;
selfkill) [ "$RANK" = 2 ] && kill -KILL $$; loop ;;
grace) # rank 0 fails at once; rank 1 does its work once $dir/$GATE exists, then runs on
    if [ "$RANK" = 0 ]; then touch "$dir/rank0_left"; exit 5; fi
    until [ -e "$dir/$GATE" ]; do sleep 0.02; done
    touch "$dir/grace_done.$RANK"; loop ;;
stubborn) trap '' TERM; loop ;;   # ignores SIGTERM: needs the SIGKILL
loop) touch "$dir/up.$RANK"; loop ;;
termfile) trap 'touch "$dir/term.$RANK"; exit 0' TERM INT; touch "$dir/up.$RANK"; loop ;;
leftover) # every rank starts a program and goes on; rank 1 (alone: rank 0) then exits 3: the
    # program it left behind must stop with the job (its group was no longer signalled)
    (exec -a "left_$2" sleep 1000) &
    [ "$RANK" = 1 ] || [ "$WORLD_SIZE" = 1 ] && exit 3
    loop ;;
quitfile) # notes SIGQUIT and leaves; its program ignores SIGQUIT (no core dump): SIGTERM stops it
    trap 'touch "$dir/quit.$RANK"; exit 0' QUIT
    (trap '' QUIT; exec -a "quitchild_$2" sleep 1000) &
    touch "$dir/up.$RANK"; loop ;;
mix) # long stdout lines between short stderr lines, for 2>&1
    awk 'BEGIN { s = sprintf("%3000s", ""); gsub(/ /, "o", s);
                 for (i = 0; i < 3000; i++) { print "OUT" i s "END"; printf "ERR%d\n", i > "/dev/stderr" } }' ;;
grandchild) # a script that runs the real program: the program must stop with it
    (exec -a "grandchild_$2" sleep 1000) & touch "$dir/up.$RANK"; wait ;;
usr) trap 'touch "$dir/usr1.$RANK"' USR1; trap 'touch "$dir/usr2.$RANK"; exit 0' USR2; touch "$dir/up.$RANK"; loop ;;
threads) echo "omp=${OMP_NUM_THREADS:-unset} py=${PYTHONUNBUFFERED:-unset}" ;;
fds) for f in 0 1 2; do [ -e "/proc/$$/fd/$f" ] || echo "fd $f closed" >&2; done; echo "fds checked" >&2 ;;
lines)
    awk -v r="$RANK" 'BEGIN { for (i = 0; i < 10000; i++) print "out", r, i }'
    awk -v r="$RANK" 'BEGIN { for (i = 0; i < 10000; i++) print "err", r, i > "/dev/stderr" }'
    head -c 98304 /dev/zero | tr '\0' x; echo           # one line of 6 full buffers (16 KiB): no empty line after
    printf 'tail %s' "$RANK"                            # last line without a newline
    ;;
esac
EOF
chmod +x "$TMP/rank.sh"
R="$TMP/rank.sh"

# --- 1. environment: prefixes, values, one port, one secret --------------------------------------
out=$(L -n 3 "$R" env "$MARK" 2>"$TMP/env.err")
rc=$?
ok=1
[ $rc = 0 ] || { fail "env: exit status $rc, want 0"; ok=0; }
ports=""; secrets=""
for r in 0 1 2; do
    line=$(printf '%s\n' "$out" | grep -E "^\[$r\] rank=")
    n=$(printf '%s\n' "$out" | grep -cE "^\[$r\] rank=")
    want="^\[$r\] rank=$r world=3 local=$r lws=3 group=0 addr=127\.0\.0\.1 port=[0-9]+ secret=[0-9a-f]{32}$"
    if [ "$n" != 1 ] || ! printf '%s\n' "$line" | grep -qE "$want"; then
        fail "env: rank $r printed '$line' ($n lines)"; ok=0
    fi
    ports="$ports"$'\n'"$(printf '%s' "$line" | sed -n 's/.* port=\([0-9]*\) .*/\1/p')"
    secrets="$secrets"$'\n'"${line##*secret=}"
    grep -qx "\[$r\] to-stderr $r" "$TMP/env.err" || { fail "env: stderr of rank $r missing"; ok=0; }
done
nports=$(printf '%s\n' "$ports" | grep -E '^[0-9]+$' | sort -u | wc -l)
nsecrets=$(printf '%s\n' "$secrets" | grep -E '^[0-9a-f]{32}$' | sort -u | wc -l)
[ "$nports" = 1 ] || { fail "env: ranks saw $nports different MASTER_PORTs"; ok=0; }
[ "$nsecrets" = 1 ] || { fail "env: ranks saw $nsecrets different RINGLET_SECRETs"; ok=0; }
[ "$(printf '%s\n' "$out" | grep -c .)" = 3 ] || { fail "env: unexpected stdout: $out"; ok=0; }
[ $ok = 1 ] && pass "environment, prefixes, one port and one secret for 3 ranks"

out=$(RINGLET_SECRET=users-own-secret L -n 2 "$R" env "$MARK" 2>/dev/null)
if [ "$(printf '%s\n' "$out" | grep -c 'secret=users-own-secret$')" = 2 ]; then
    pass "a RINGLET_SECRET already set is kept"
else
    fail "user's RINGLET_SECRET not kept: $out"
fi

# --- 2. exit status propagation; the looping siblings are stopped (else the watchdog: 137) ---------
# (Time bounds here are far above what the launcher needs, 3 s at most: they catch a launcher
# that waits for nothing, not a slow machine.)
t=$(now_ms)
L -n 3 "$R" fail3 "$MARK" >/dev/null 2>"$TMP/fail3.err"
rc=$?; dt=$(($(now_ms) - t))
if [ $rc = 3 ] && [ $dt -lt 10000 ] && grep -q "rank 1 exited with status 3" "$TMP/fail3.err" && no_leftovers; then
    pass "rank exits 3 -> launcher exits 3 after ${dt} ms, siblings stopped"
else
    fail "exit propagation: rc=$rc (want 3), ${dt} ms, leftovers: $(leftovers | tr '\n' ' ')"
    cat "$TMP/fail3.err"
fi

# a rank that exits 3 after starting a program that runs on (its wrapper script killed, say):
# the job's end stops that program too, at 2 ranks (rank 0 still running then) and at 1
for n in 2 1; do
    L -n $n "$R" leftover "$MARK" >/dev/null 2>"$TMP/leftover.err"
    rc=$?
    if [ $rc = 3 ] && no_leftovers; then
        pass "$n rank(s), rank $((n - 1)) exits 3 leaving a program running: it is stopped"
    else
        fail "a rank's leftover program at $n rank(s): rc=$rc (want 3), leftovers: $(leftovers | tr '\n' ' ')"
        cat "$TMP/leftover.err"
        kill -KILL $(leftovers) 2>/dev/null
    fi
done

# --- 3. a rank killed by SIGKILL -> 137 --------------------------------------------------------------
L -n 3 "$R" selfkill "$MARK" >/dev/null 2>"$TMP/kill.err"
rc=$?
if [ $rc = 137 ] && grep -q "rank 2 killed by signal SIGKILL" "$TMP/kill.err" && no_leftovers; then
    pass "rank killed by SIGKILL -> 137"
else
    fail "SIGKILL: rc=$rc (want 137)"; cat "$TMP/kill.err"
fi

# --- 4. --grace lets a sibling finish its work; without it the sibling is stopped at once ----------
# Without: rank 1's work waits for a file made only once the launcher has returned, so it is
# done only if the launcher left rank 1 running (and then the watchdog ends the launcher: 137).
t=$(now_ms)
GATE=launcher_returned L -n 2 "$R" grace "$MARK" >/dev/null 2>"$TMP/grace0.err"
rc=$?; dt=$(($(now_ms) - t))
touch "$TMP/launcher_returned"
if [ $rc = 5 ] && [ $dt -lt 10000 ] && no_leftovers && [ ! -e "$TMP/grace_done.1" ]; then
    pass "no grace: sibling stopped before its work (${dt} ms)"
else
    fail "no grace: rc=$rc (want 5), ${dt} ms, file $( [ -e "$TMP/grace_done.1" ] && echo written || echo absent)"
    cat "$TMP/grace0.err"
fi
# With: rank 1 works once rank 0 has left, then runs on until the grace is over.
rm -f "$TMP/rank0_left" "$TMP/grace_done.1"
t=$(now_ms)
GATE=rank0_left L -n 2 --grace 3 "$R" grace "$MARK" >/dev/null 2>"$TMP/grace.err"
rc=$?; dt=$(($(now_ms) - t))
if [ $rc = 5 ] && [ -e "$TMP/grace_done.1" ] && [ $dt -ge 2900 ] && no_leftovers; then
    pass "--grace 3: sibling finished its work, then was stopped (${dt} ms)"
else
    fail "--grace: rc=$rc (want 5), ${dt} ms, file $( [ -e "$TMP/grace_done.1" ] && echo written || echo absent)"
    cat "$TMP/grace.err"
fi

# --- 5. --timeout on ranks that ignore SIGTERM -> 124, SIGKILL, nothing left -----------------------
t=$(now_ms)
L -n 3 --timeout 1 "$R" stubborn "$MARK" >/dev/null 2>"$TMP/timeout.err"
rc=$?; dt=$(($(now_ms) - t))
if [ $rc = 124 ] && [ $dt -ge 900 ] && [ $dt -lt 15000 ] && grep -q "timeout after 1 s" "$TMP/timeout.err" && no_leftovers; then
    pass "--timeout 1 -> 124 after ${dt} ms, no process left"
else
    fail "timeout: rc=$rc (want 124), ${dt} ms, leftovers: $(leftovers | tr '\n' ' ')"
    cat "$TMP/timeout.err"
fi

# --- 6. the launcher itself gets SIGTERM, or is SIGKILLed -----------------------------------------
# (the ranks note the SIGTERM they get, so a launcher that died of it, its ranks then
# killed by their parent-death signal, does not pass)
"$RUN" -n 3 "$R" termfile "$MARK" >/dev/null 2>"$TMP/sigterm.err" &
pid=$!
wait_files 3 up
up=$?
kill -TERM $pid
wait_bounded $pid
rc=$?
if [ $rc = 143 ] && [ "$up" = 0 ] && no_leftovers && wait_files 3 term && grep -q "got SIGTERM, forwarding it" "$TMP/sigterm.err"; then
    pass "SIGTERM to the launcher is forwarded -> 143, no process left"
else
    fail "SIGTERM to launcher: rc=$rc (want 143), leftovers: $(leftovers | tr '\n' ' ')"
    cat "$TMP/sigterm.err"
fi
# (started from a subshell whose stderr is closed, so bash's "Killed" notice stays out of the log)
rm -f "$TMP"/up.*
( "$RUN" -n 3 "$R" loop "$MARK" >/dev/null 2>&1 &
  echo $! >"$TMP/launcher.pid"
  wait ) 2>/dev/null &
sub=$!
wait_files 3 up
up=$?
before=$(leftovers | wc -l)   # the launcher and its 3 ranks
kill -KILL "$(cat "$TMP/launcher.pid")"
wait_bounded $sub
if [ "$up" = 0 ] && [ "$before" -ge 4 ] && no_leftovers; then
    pass "SIGKILL to the launcher leaves no rank behind"
else
    fail "SIGKILL to launcher: $before processes before, leftovers: $(leftovers | tr '\n' ' ')"
fi

# signal_launcher SIG MODE: starts the launcher on 2 ranks of rank.sh MODE (from Python, in
# $TMP, with no core dumps and SIGQUIT at its default), sends it SIG once both ranks are up,
# and prints its wait status (-N: killed by signal N; "hung" after 20 s)
signal_launcher() {
    /usr/bin/python3 - "$RUN" "$R" "$MARK" "$TMP" "$1" "$2" <<'PY'
import os, resource, signal, subprocess, sys, time
run, rank, mark, tmp, sig, mode = sys.argv[1:]
def no_core():
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
p = subprocess.Popen([run, "-n", "2", rank, mode, mark], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     preexec_fn=no_core, cwd=tmp)
until = time.monotonic() + 20
while not all(os.path.exists("%s/up.%d" % (tmp, r)) for r in (0, 1)) and time.monotonic() < until:
    time.sleep(0.05)
p.send_signal(getattr(signal, sig))
try:
    print(p.wait(20))
except subprocess.TimeoutExpired:
    p.kill(); print("hung")
PY
}
# SIGINT: forwarded, and the launcher then dies of it (a shell that sees a child exit 130
# instead takes the Ctrl-C as handled by it, and a loop of ringlet-run goes on)
rm -f "$TMP"/up.* "$TMP"/term.*
if [ -x /usr/bin/python3 ]; then
    sigint=$(signal_launcher SIGINT termfile)
    if [ "$sigint" = -2 ] && wait_files 2 term && no_leftovers; then
        pass "SIGINT to the launcher is forwarded, and it dies of SIGINT"
    else
        fail "SIGINT to launcher: wait status $sigint (want -2: killed by SIGINT), leftovers: $(leftovers | tr '\n' ' ')"
    fi
else
    echo "skip: SIGINT's wait status (needs /usr/bin/python3)"
fi
# SIGQUIT (Ctrl-\\, which reaches the launcher alone): forwarded as SIGINT is, the launcher
# dies of it (no core: RLIMIT_CORE 0, in $TMP), and what the ranks started is stopped (it
# ignores SIGQUIT: by SIGTERM)
rm -f "$TMP"/up.*
if [ -x /usr/bin/python3 ]; then
    sigquit=$(signal_launcher SIGQUIT quitfile)
    if [ "$sigquit" = -3 ] && wait_files 2 quit && no_leftovers; then
        pass "SIGQUIT to the launcher is forwarded, what the ranks started is stopped, and it dies of SIGQUIT"
    else
        fail "SIGQUIT to launcher: wait status $sigquit (want -3), leftovers: $(leftovers | tr '\n' ' ')"
        kill -KILL $(leftovers) 2>/dev/null
    fi
else
    echo "skip: SIGQUIT's wait status (needs /usr/bin/python3)"
fi
# started with stdin and stdout closed: the ranks still have descriptors 0, 1 and 2
L -n 1 "$R" fds "$MARK" <&- >&- 2>"$TMP/fds.err"
rc=$?
if [ $rc = 0 ] && grep -q "fds checked" "$TMP/fds.err" && ! grep -q "closed" "$TMP/fds.err"; then
    pass "started without stdin and stdout: the rank has descriptors 0-2"
else
    fail "started without stdin and stdout: rc=$rc: $(tr '\n' ' ' <"$TMP/fds.err")"
fi

# --- 7. exec failure -> 127 with the program named ----------------------------------------------------
printf '#!/nonexistent/interpreter\n' >"$TMP/badinterp"
chmod +x "$TMP/badinterp"
L -n 2 "$TMP/badinterp" "$MARK" >/dev/null 2>"$TMP/exec.err"
rc=$?
if [ $rc = 127 ] && grep -q "badinterp" "$TMP/exec.err"; then
    pass "exec failure -> 127"
else
    fail "exec failure: rc=$rc (want 127)"; cat "$TMP/exec.err"
fi

# --- 8. bad usage -> 2 ---------------------------------------------------------------------------------
ok=1
while IFS= read -r args; do
    eval "set -- $args"
    L "$@" >/dev/null 2>"$TMP/usage.err"
    rc=$?
    if [ $rc != 2 ] || [ ! -s "$TMP/usage.err" ]; then
        fail "usage: '$args' gave $rc (want 2) and stderr '$(cat "$TMP/usage.err")'"; ok=0
    fi
done <<EOF
true
-n 0 true
-n -1 true
-n abc true
-n 2
-n 2 --
-n
--bogus -n 2 true
-n 2 --timeout x true
-n 2 --grace -1 true
-n 2 --bind sockets true
-n 2 --bind
-n 2 no_such_program_$MARK
-n 2 /nonexistent/$MARK
-n 2 $TMP
EOF
[ $ok = 1 ] && pass "bad usage -> 2"
if ! L -n 1 -- sh -c 'exit 0' || ! L -n2 --timeout=5 --grace=0.1 true; then
    fail "valid spellings '-n 1 --', '-n2 --timeout=5 --grace=0.1' refused"
fi

# --- 9. 10000 lines per rank and stream, a 98304-byte line, a last line without newline ---------------
L -n 3 "$R" lines "$MARK" >"$TMP/lines.out" 2>"$TMP/lines.err"
rc=$?
ok=1
[ $rc = 0 ] || { fail "lines: rc=$rc"; ok=0; }
for r in 0 1 2; do
    # lines must come complete and in order for each rank
    res=$(awk -v r="$r" -v tag=out -v p="[$r] " 'BEGIN { n = 0 }
        index($0, p) == 1 { rest = substr($0, length(p) + 1)
            if (rest ~ /^x+$/) { xs += length(rest); next }
            if (rest == "tail " r) { tail++; next }
            if (rest != tag " " r " " n) { bad++; next }
            n++ }
        END { print n + 0, bad + 0, xs + 0, tail + 0 }' "$TMP/lines.out")
    [ "$res" = "10000 0 98304 1" ] || { fail "lines: rank $r stdout: got '$res', want '10000 0 98304 1'"; ok=0; }
    res=$(awk -v r="$r" -v tag=err -v p="[$r] " 'BEGIN { n = 0 }
        index($0, p) == 1 { rest = substr($0, length(p) + 1)
            if (rest != tag " " r " " n) { bad++; next }
            n++ }
        END { print n + 0, bad + 0 }' "$TMP/lines.err")
    [ "$res" = "10000 0" ] || { fail "lines: rank $r stderr: got '$res', want '10000 0'"; ok=0; }
done
n=$(grep -cvE '^\[[0-2]\] ' "$TMP/lines.out")
[ "$n" = 0 ] || { fail "lines: $n stdout lines without a rank prefix"; ok=0; }
n=$(grep -c ' err ' "$TMP/lines.out")
[ "$n" = 0 ] || { fail "lines: $n stderr lines on stdout"; ok=0; }
[ $ok = 1 ] && pass "10000 lines per rank on stdout and stderr, long and partial lines, nothing lost"

# --- 10. --bind cores: the allowed cores split among the ranks; more ranks than cores: one core each ----
cores=$(grep Cpus_allowed_list /proc/self/status | cut -f2)
ncores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) # nproc answers OMP_NUM_THREADS where set
expand() { # a cpu list (0-2,5) as one core per line
    tr ',' '\n' <<<"$1" | awk -F- '{ hi = NF > 1 ? $2 : $1; for (c = $1; c <= hi; c++) print c }'
}
L -n "$ncores" --bind cores sh -c 'echo "$(grep Cpus_allowed_list /proc/self/status | cut -f2)"' >"$TMP/bind.out" 2>"$TMP/bind.err"
rc=$?
got=$(sed 's/^\[[0-9]*\] //' "$TMP/bind.out" | while read -r l; do expand "$l"; done | sort -n | tr '\n' ' ')
want=$(expand "$cores" | sort -n | tr '\n' ' ')
each=$(sed 's/^\[[0-9]*\] //' "$TMP/bind.out" | while read -r l; do expand "$l" | wc -l; done | sort -u | tr '\n' ' ')
if [ $rc = 0 ] && [ -n "$cores" ] && [ "$got" = "$want" ] && [ "$each" = "1 " ] && [ ! -s "$TMP/bind.err" ]; then
    pass "--bind cores: $ncores ranks, one core each, all of $cores"
else
    fail "--bind cores: rc=$rc, ranks' cores '$got' (want each once: '$want', one per rank: '$each'), stderr '$(cat "$TMP/bind.err")'"
fi
# More ranks than cores: each rank on one core, rank r on allowed core (r + popcount(r / C)) mod C,
# so the cores' loads differ by at most one and ranks differing in one bit sit apart.
popcount() { local v=$1 c=0; while [ "$v" -gt 0 ]; do c=$((c + (v & 1))); v=$((v >> 1)); done; echo $c; }
allowed=($(expand "$cores"))
C=${#allowed[@]}
for N in $((ncores + 1)) $((2 * ncores)); do
    L -n $N --bind cores sh -c 'echo "$RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)"' >"$TMP/bind.out" 2>"$TMP/bind.err"
    rc=$?
    ok=1 why=""
    declare -A load=()
    for ((r = 0; r < N; r++)); do
        got=$(sed 's/^\[[0-9]*\] //' "$TMP/bind.out" | awk -v r=$r '$1 == r { print $2 }')
        want=${allowed[$(((r + $(popcount $((r / C)))) % C))]}
        [ "$got" = "$want" ] || { ok=0; why="$why rank $r on '$got' (want $want);"; }
        load[$got]=$((${load[$got]:-0} + 1))
    done
    lo=$(printf '%s\n' "${load[@]}" | sort -n | head -n1) hi=$(printf '%s\n' "${load[@]}" | sort -n | tail -n1)
    [ $((hi - lo)) -le 1 ] && [ ${#load[@]} = $C ] || { ok=0; why="$why loads ${load[*]} over ${#load[@]} of $C cores;"; }
    if [ $C -ge 2 ] && [ $N = $((2 * ncores)) ]; then # r and r^1 (recursive doubling's first partners) apart
        for ((r = 0; r + 1 < N; r += 2)); do
            a=$(sed 's/^\[[0-9]*\] //' "$TMP/bind.out" | awk -v r=$r '$1 == r { print $2 }')
            b=$(sed 's/^\[[0-9]*\] //' "$TMP/bind.out" | awk -v r=$((r + 1)) '$1 == r { print $2 }')
            [ "$a" != "$b" ] || { ok=0; why="$why ranks $r and $((r + 1)) share core $a;"; }
        done
    fi
    unset load
    if [ $rc = 0 ] && [ $ok = 1 ] && [ ! -s "$TMP/bind.err" ]; then
        pass "--bind cores with $N ranks on $C cores: one core each, loads within one, partners apart"
    else
        fail "--bind cores, $N ranks on $C cores: rc=$rc,$why stderr '$(cat "$TMP/bind.err")'"
    fi
done

# The first failing rank's message is always there, before the launcher says it exited
# (issue 22): every rank of ringlet-perf fails the same way on a flag value it refuses
# (-t 2: it runs one thread per process; before init) and on a root out of range (after
# init, a destroy); whichever exits first, the launcher stops the others at once (no
# --grace), so the message must be that rank's own.
PERF="$BUILD/bin/ringlet-perf"
case "$PERF" in /*) ;; *) PERF="$PWD/$PERF" ;; esac
first_said() { # file pattern: the first rank the launcher reports as failed printed pattern before that
    local r
    r=$(sed -n 's/^ringlet-run: rank \([0-9]*\) exited with status .*/\1/p' "$1" | head -n 1)
    [ -n "$r" ] && sed -n "/^ringlet-run: rank $r exited/q;p" "$1" | grep -q "^\[$r\] .*$2"
}
if [ -x "$PERF" ]; then
    bad=0
    for i in 1 2 3 4 5 6 7 8 9 10; do
        L -n 4 "$PERF" allreduce -b 8 -e 8 -t 2 "$MARK" >"$TMP/first.out" 2>&1
        first_said "$TMP/first.out" "-t 2: one thread per process only" || { bad=$((bad + 1)); cp "$TMP/first.out" "$TMP/first.bad"; }
        RINGLET_TIMEOUT=30 L -n 4 "$PERF" broadcast -b 8 -e 8 -r 9 >"$TMP/first.out" 2>&1
        first_said "$TMP/first.out" "root 9 is not below nranks 4" || { bad=$((bad + 1)); cp "$TMP/first.out" "$TMP/first.bad"; }
    done
    if [ $bad = 0 ]; then
        pass "the first failing rank's message is printed before the launcher's word on it (20 runs)"
    else
        fail "$bad of 20 runs lack the first failing rank's message; one of them:"
        cat "$TMP/first.bad"
    fi
else
    fail "$PERF not found (build first)"
fi

# ringlet-perf -T: each form's timed calls are counted from an estimate, the same on every
# rank (else the ranks' loops would not meet: a hang, caught by the timeout); the count is
# in -J, at least -n; non-blocking calls are refused (their requests are -n long).
if [ -x "$PERF" ]; then
    if RINGLET_TIMEOUT=30 L -n 2 "$PERF" allreduce -b 8 -e 64 -f 8 -n 10 -w 10 -T 0.02 -J "$TMP/T.json" >"$TMP/T.out" 2>&1 &&
        /usr/bin/python3 - "$TMP/T.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["settings"]["target_s"] == 0.02, d["settings"]
rows = d["results"]
assert len(rows) == 2, rows
for row in rows:
    for form in ("out_of_place", "in_place"):
        f = row[form]
        assert f["iters"] >= 10 and f["wrong"] == 0, (row["size"], form, f)
PY
    then
        pass "ringlet-perf -T: each form timed over the counted calls, the count in -J, results right"
    else
        fail "ringlet-perf -T: $(tail -5 "$TMP/T.out")"
    fi
    L -n 2 "$PERF" allreduce -b 8 -e 8 -z 0 -T 0.02 >"$TMP/T.out" 2>&1
    if grep -q -- "-T times blocking calls without -I" "$TMP/T.out"; then
        pass "ringlet-perf -T -z 0: refused, saying why"
    else
        fail "ringlet-perf -T -z 0: $(tail -3 "$TMP/T.out")"
    fi
fi

# A reader of the launcher's output that stalls: the launcher still minds its --timeout
# (it blocked in its write, with its signals held, until killed), then waits for the
# reader but ends at a signal (timeout's TERM: 124; a launcher that hangs: 137).
mkfifo "$TMP/stall"
exec 7<>"$TMP/stall" # held open, never read: the pipe fills
t0=$(now_ms)
timeout -k 5 -s TERM 8 "$RUN" -n 1 --timeout 2 sh -c 'yes | head -c 2000000; sleep 60' "$MARK" >"$TMP/stall" 2>"$TMP/stall.err"
rc=$?
exec 7<&-
if [ $rc = 124 ] && grep -q "timeout after 2 s" "$TMP/stall.err"; then
    pass "stdout never read: the rank stopped at --timeout, the launcher ended at a signal ($(($(now_ms) - t0)) ms)"
else
    fail "stdout never read: exit $rc, stderr: $(head -c 300 "$TMP/stall.err")"
fi
# The same on a terminal that nobody reads (a stalled ssh session): a terminal polls
# writable with less room than a write of PIPE_BUF needs, and the launcher blocked in it.
if [ -x /usr/bin/python3 ]; then
    t0=$(now_ms)
    rc=$(/usr/bin/python3 - "$RUN" "$MARK" "$TMP" <<'PY'
import os, pty, subprocess, sys
run, mark, tmp = sys.argv[1:]
master, slave = pty.openpty()  # the master held open, never read: the terminal fills
with open(tmp + "/pty.err", "w") as err:
    p = subprocess.Popen(["timeout", "-k", "5", "-s", "TERM", "8", run, "-n", "1", "--timeout", "2", "sh", "-c",
                          "yes | head -c 2000000; sleep 60", mark], stdout=slave, stderr=err, stdin=subprocess.DEVNULL)
os.close(slave)
print(p.wait())
os.close(master)
PY
)
    if [ "$rc" = 124 ] && grep -q "timeout after 2 s" "$TMP/pty.err"; then
        pass "a terminal never read: the rank stopped at --timeout, the launcher ended at a signal ($(($(now_ms) - t0)) ms)"
    else
        fail "a terminal never read: exit $rc, stderr: $(head -c 300 "$TMP/pty.err")"
    fi
else
    echo "skip: a terminal never read (needs /usr/bin/python3)"
fi
# stdout and stderr into one pipe (2>&1) read slowly: no line cut by another (stdout's queue
# stopped in a line when the pipe filled, and stderr's lines went in between)
L -n 2 "$R" mix "$MARK" 2>&1 | /usr/bin/python3 -c '
import os, sys, time
with open(sys.argv[1], "wb") as out:
    while True:
        b = os.read(0, 5000)
        if not b:
            break
        out.write(b)
        time.sleep(0.0005)' "$TMP/mix.out"
# (o+, not o{3000}: grep's bounded repeat took 90 s over the 18 MB; a cut line has no END
# or carries the other stream's text, and the count below catches a split one)
bad=$(grep -cvE '^\[[01]\] (OUT[0-9]+o+END|ERR[0-9]+)$' "$TMP/mix.out")
n=$(grep -c . "$TMP/mix.out")
if [ "$bad" = 0 ] && [ "$n" = 12000 ]; then
    pass "stdout and stderr into one slowly read pipe: 12000 lines, every one whole"
else
    fail "2>&1 into a slow pipe: $n lines, $bad cut: $(grep -m1 -vE '^\[[01]\] (OUT[0-9]+o+END|ERR[0-9]+)$' "$TMP/mix.out" | head -c 100)"
fi
# A reader that pauses, then reads: 20 MB (more than the launcher holds: its ranks wait)
# all arrive, every line whole and in order.
( sleep 2; cat >"$TMP/late.out" ) <"$TMP/stall" &
reader=$!
L -n 1 sh -c 'yes 0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456 | head -n 200000' "$MARK" >"$TMP/stall"
rc=$?
wait $reader
n=$(grep -cx "\[0\] 0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456" "$TMP/late.out")
if [ $rc = 0 ] && [ "$n" = 200000 ] && [ "$(wc -l <"$TMP/late.out")" = 200000 ]; then
    pass "a reader that pauses 2 s: all 200000 lines (20 MB) arrive whole"
else
    fail "a reader that pauses 2 s: exit $rc, $n of 200000 lines right, $(wc -l <"$TMP/late.out") in all"
fi

# A rank that is a script running the real program: --timeout stops the program too (the
# launcher signals each rank's process group; the program was left running, reparented)
rm -f "$TMP"/up.*
L -n 2 --timeout 2 "$R" grandchild "$MARK" >/dev/null 2>"$TMP/gc.err"
rc=$?
if [ $rc = 124 ] && no_leftovers; then
    pass "--timeout stops what the ranks started, not only the ranks"
else
    fail "grandchildren: exit $rc (want 124), leftovers: $(leftovers | tr '\n' ' ')"
fi
# Rank 0 reads the terminal on stdin (a session of its own has no controlling terminal, so
# no SIGTTIN; a process group of its own in the launcher's session would stop at the read)
if command -v script >/dev/null 2>&1; then
    tty=$(printf 'typed\n' | timeout -s KILL 20 script -qec "'$RUN' -n 2 sh -c 'if [ \$RANK = 0 ]; then read x; echo \"got \$x\"; fi' $MARK" /dev/null 2>&1 | tr -d '\r')
    if printf '%s\n' "$tty" | grep -qx '\[0\] got typed'; then
        pass "rank 0 reads the terminal on stdin"
    else
        fail "rank 0 reading the terminal: got '$tty'"
    fi
else
    echo "skip: rank 0 reading the terminal (needs script from util-linux)"
fi
# SIGUSR1 and SIGUSR2 passed on to every rank, the job going on (SIGUSR1 killed the
# launcher, and with it every rank); mpirun's -np spelling
rm -f "$TMP"/up.* "$TMP"/usr*.*
"$RUN" -np 2 "$R" usr "$MARK" >/dev/null 2>"$TMP/usr.err" &
pid=$!
wait_files 2 up
kill -USR1 $pid
wait_files 2 usr1
got1=$?
alive=$(kill -0 $pid 2>/dev/null && echo yes)
kill -USR2 $pid
wait_bounded $pid
rc=$?
if [ $got1 = 0 ] && [ "$alive" = yes ] && [ $rc = 0 ] && wait_files 2 usr2 && no_leftovers; then
    pass "-np 2; SIGUSR1 passed on, the job going on; SIGUSR2 passed on, the ranks ended it"
else
    fail "SIGUSR1/2: usr1 files $got1, launcher alive after SIGUSR1: ${alive:-no}, exit $rc (want 0)"
    cat "$TMP/usr.err"
fi
# Output into a pipe whose reader leaves (| head): the ranks get SIGPIPE at their next
# write, as they would writing there themselves (they ran on, the launcher dropping their
# output, and `yes` never ended)
t0=$(now_ms)
timeout -s KILL 20 "$RUN" -n 2 sh -c 'exec yes "$0"' "$MARK" 2>"$TMP/head.err" | head -n 1 >"$TMP/head.out"
st=${PIPESTATUS[0]}
first=$(cat "$TMP/head.out")
if [ "$st" != 137 ] && [ "${first#\[}" != "$first" ] && no_leftovers; then
    pass "| head -n 1: the ranks ended by SIGPIPE, the launcher with status $st ($(($(now_ms) - t0)) ms): $first"
else
    fail "| head -n 1: launcher status $st (137: killed by the test's 20 s watchdog), first line '$first', leftovers: $(leftovers | tr '\n' ' ')"
    head -c 500 "$TMP/head.err"
fi
# OpenMP's threads shared out, Python unbuffered, unless the user set them
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
want=$((cores / 2 > 1 ? cores / 2 : 1))
out=$(unset OMP_NUM_THREADS; L -n 2 "$R" threads "$MARK" 2>/dev/null)
out2=$(OMP_NUM_THREADS=7 PYTHONUNBUFFERED= L -n 2 "$R" threads "$MARK" 2>/dev/null)
if [ "$(printf '%s\n' "$out" | grep -c "omp=$want py=1$")" = 2 ] && [ "$(printf '%s\n' "$out2" | grep -c "omp=7 py=unset$")" = 2 ]; then
    pass "OMP_NUM_THREADS=$want (cores / ranks) and PYTHONUNBUFFERED=1 unless set"
else
    fail "OMP_NUM_THREADS/PYTHONUNBUFFERED: got '$out' and, set by the user, '$out2'"
fi

if [ $fails = 0 ]; then
    echo "launcher: all passed"
    exit 0
fi
echo "launcher: $fails failed"
exit 1

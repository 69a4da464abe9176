#!/usr/bin/env bash
# RINGLET_TRACE end to end: a 3-rank all-reduce benchmark (ringlet-perf, 1 MiB, 64 KiB
# chunks so that every step has several chunks) writes one Chrome-trace file per rank;
# perf/trace_merge.py joins them; python3 (json module) checks the files:
#   - exactly t.rank0.json .. t.rank2.json, no t.json, no temporary left behind;
#   - every file valid JSON, otherData.rank/nranks right, nothing dropped, pid = rank;
#   - merged: every event has ph, pid, tid, ts, every "X" a dur >= 0; pids 0, 1, 2;
#     as many spans as the three files; sorted by ts; the spans of the whole run within
#     the wall time the run took (the ranks share CLOCK_MONOTONIC on one host);
#   - every rank: an "allreduce" span on lane 0 for each call (>= 3: 1 warm-up + 2 timed),
#     "send" on lane 1, "recv" on lane 2, "reduce" on lane 3, with chunk indices (at
#     least 2 distinct ones), send/recv with the peer; every chunk span lies within the
#     lane-0 span of its operation (same op and seq) on its rank;
#   - split communicators (more.c's at 4 ranks): the world's files kept, the splits'
#     named t.comm<tag>.rank<r>.json; a send and a receive on host memory (more.c's 8 MiB
#     from rank 0 to 1) each have a lane-0 span with the peer and the bytes.
# Exit 0 = passed, 1 = failed, 77 = skipped (no python3).
set -u

BUILD=${BUILD:-build}
RUN="$BUILD/bin/ringlet-run"
PERF="$BUILD/bin/ringlet-perf"
MERGE="$(cd "$(dirname "$0")/../.." && pwd)/perf/trace_merge.py"
if [ -x /usr/bin/python3 ]; then
    PY=/usr/bin/python3
elif command -v python3 >/dev/null 2>&1; then
    PY=$(command -v python3)
else
    echo "SKIP: no python3 to check the trace files"
    exit 77
fi
for f in "$RUN" "$PERF" "$MERGE"; do
    if [ ! -e "$f" ]; then
        echo "FAIL: $f not found (build first, or set BUILD)"
        exit 1
    fi
done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-trace.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export RINGLET_TIMEOUT=${RINGLET_TIMEOUT:-120}

fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "ok:   $*"; }
now_us() { echo $(($(date +%s%N) / 1000)); }

t0=$(now_us)
RINGLET_TRACE="$TMP/t.json" RINGLET_CHUNK_SIZE=64K \
    "$RUN" -n 3 --timeout 300 "$PERF" allreduce -b 1M -e 1M -n 2 -w 1 -c 1 >"$TMP/out" 2>"$TMP/err"
rc=$?
elapsed_us=$(($(now_us) - t0))
if [ $rc != 0 ]; then
    fail "ringlet-perf under RINGLET_TRACE: launcher exit status $rc"
    tail -n 20 "$TMP/out" "$TMP/err"
    exit 1
fi
pass "3-rank allreduce with RINGLET_TRACE=$TMP/t.json ($((elapsed_us / 1000)) ms)"
if grep -q "RINGLET_TRACE" "$TMP/err"; then
    fail "warnings about the trace:"
    grep "RINGLET_TRACE" "$TMP/err" | head -n 5
fi

files=$(cd "$TMP" && ls)
want="out
err
t.rank0.json
t.rank1.json
t.rank2.json"
if [ "$(sort <<<"$files")" = "$(sort <<<"$want")" ]; then
    pass "one file per rank: t.rank0.json t.rank1.json t.rank2.json"
else
    fail "files written: $(tr '\n' ' ' <<<"$files")(want t.rank0.json t.rank1.json t.rank2.json only)"
fi

if "$PY" "$MERGE" -o "$TMP/merged.json" "$TMP/t.json" >"$TMP/merge.out" 2>&1; then
    pass "trace_merge.py: $(tail -n 1 "$TMP/merge.out")"
else
    fail "trace_merge.py failed:"
    cat "$TMP/merge.out"
    echo "trace: $fails failed"
    exit 1
fi

if ! "$PY" - "$TMP" 3 "$elapsed_us" <<'EOF'
import json, math, os, sys
from collections import defaultdict

tmp, nranks, elapsed_us = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fails = 0

def ok(msg):
    print("ok:   " + msg)

def fail(msg):
    global fails
    fails += 1
    print("FAIL: " + msg)

def no_constant(c):
    raise ValueError(c + " is not JSON")

def load(path):
    with open(path, "rb") as f:
        return json.loads(f.read().decode("utf-8"), parse_constant=no_constant)

def num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

# each rank's own file
per_rank_spans = 0
for r in range(nranks):
    path = os.path.join(tmp, "t.rank%d.json" % r)
    try:
        doc = load(path)
        od, ev = doc["otherData"], doc["traceEvents"]
        bad = []
        if od.get("rank") != r or od.get("nranks") != nranks:
            bad.append("otherData rank/nranks %r/%r" % (od.get("rank"), od.get("nranks")))
        if od.get("dropped"):
            bad.append("%d spans dropped" % od["dropped"])
        if any(e.get("pid") != r for e in ev):
            bad.append("events of another pid")
        spans = sum(1 for e in ev if e.get("ph") == "X")
        per_rank_spans += spans
        if bad:
            fail("%s: %s" % (path, "; ".join(bad)))
        else:
            ok("t.rank%d.json: valid, %d spans" % (r, spans))
    except Exception as e:
        fail("%s: not a valid trace: %r" % (path, e))

# the merged file
try:
    doc = load(os.path.join(tmp, "merged.json"))
    ev = doc["traceEvents"]
except Exception as e:
    fail("merged.json: not valid JSON: %r" % e)
    sys.exit(1)

bad = [e for e in ev if not isinstance(e, dict) or not {"ph", "pid", "tid", "ts"} <= set(e) or not num(e["ts"])]
if bad:
    fail("merged.json: %d events without ph/pid/tid/ts, e.g. %r" % (len(bad), bad[0]))
else:
    ok("merged.json: %d events, all with ph, pid, tid, ts" % len(ev))
xs = [e for e in ev if isinstance(e, dict) and e.get("ph") == "X"]
bad = [e for e in xs if not num(e.get("dur")) or e["dur"] < 0]
if bad:
    fail("merged.json: %d X events without a dur >= 0, e.g. %r" % (len(bad), bad[0]))
if len(xs) != per_rank_spans:
    fail("merged.json: %d spans, the rank files have %d" % (len(xs), per_rank_spans))
pids = sorted({e.get("pid") for e in ev if isinstance(e, dict)})
if pids != list(range(nranks)):
    fail("merged.json: pids %r, want %r" % (pids, list(range(nranks))))
else:
    ok("merged.json: pids %r" % pids)
tss = [e["ts"] for e in ev if isinstance(e, dict) and e.get("ph") != "M" and num(e.get("ts"))]
if tss != sorted(tss):
    fail("merged.json: events not sorted by ts")
good = [e for e in xs if num(e.get("ts")) and num(e.get("dur"))]
if good:
    lo = min(e["ts"] for e in good)
    hi = max(e["ts"] + e["dur"] for e in good)
    if lo <= 0 or hi - lo > elapsed_us + 1e6:
        fail("merged.json: spans cover %.0f us from ts %.0f; the run took %d us" % (hi - lo, lo, elapsed_us))
    else:
        ok("merged.json: spans cover %.1f ms of a %.1f ms run" % ((hi - lo) / 1e3, elapsed_us / 1e3))

# every rank: the names on their lanes, chunk indices, spans inside their operation
want = {"allreduce": 0, "send": 1, "recv": 2, "reduce": 3}
for r in range(nranks):
    mine = [e for e in good if e.get("pid") == r]
    names = defaultdict(list)
    for e in mine:
        names[e.get("name")].append(e)
    bad = []
    for name, lane in want.items():
        es = names.get(name, [])
        if not es:
            bad.append('no "%s" span' % name)
            continue
        wrong = [e for e in es if e.get("tid") != lane]
        if wrong:
            bad.append('"%s" on lane %r, want %d' % (name, wrong[0].get("tid"), lane))
        args = [e.get("args") if isinstance(e.get("args"), dict) else {} for e in es]
        if lane:
            if any(not isinstance(a.get("chunk"), int) for a in args):
                bad.append('"%s" without a chunk index' % name)
            elif len({a["chunk"] for a in args}) < 2:
                bad.append('"%s": one chunk index only (%r)' % (name, args[0]["chunk"]))
            if name in ("send", "recv") and any(not isinstance(a.get("peer"), int) for a in args):
                bad.append('"%s" without a peer' % name)
    n_ops = len(names.get("allreduce", []))
    if 0 < n_ops < 3:
        bad.append("%d allreduce spans, want >= 3 (1 warm-up + 2 timed)" % n_ops)
    # every chunk span inside the lane-0 span of its operation
    ops = {}
    for e in mine:
        a = e.get("args") if isinstance(e.get("args"), dict) else {}
        if e.get("tid") == 0 and "seq" in a:
            ops[(a.get("op"), a["seq"])] = e
    outside = 0
    first = None
    for e in mine:
        a = e.get("args") if isinstance(e.get("args"), dict) else {}
        if e.get("tid") in (1, 2, 3):
            o = ops.get((a.get("op"), a.get("seq")))
            if o is None or e["ts"] < o["ts"] - 1.0 or e["ts"] + e["dur"] > o["ts"] + o["dur"] + 1.0:
                outside += 1
                first = first or e
    if outside:
        bad.append("%d chunk spans not within a lane-0 span of the same op and seq, e.g. %r" % (outside, first))
    if bad:
        fail("rank %d: %s" % (r, "; ".join(bad)))
    else:
        ok("rank %d: %d allreduce, %d send, %d recv, %d reduce spans, chunks inside their operation" % (
            r, n_ops, len(names["send"]), len(names["recv"]), len(names["reduce"])))
sys.exit(1 if fails else 0)
EOF
then
    fails=$((fails + 1))
fi

# perf/trace_summary.py reads the merged file: one allreduce row per rank, shares within 0..100%
if "$PY" "$(dirname "$0")/../../perf/trace_summary.py" "$TMP/merged.json" >"$TMP/summary.out" 2>&1 &&
    [ "$(grep -cE '^[0-2] +allreduce +[0-9]+ +[0-9.]+ +[0-9.]+% +[0-9.]+% +[0-9.]+%$' "$TMP/summary.out")" = 3 ] &&
    awk '/allreduce/ { for (i = 5; i <= 7; i++) if ($i + 0 > 100.05) bad = 1 } END { exit bad }' "$TMP/summary.out"; then
    pass "trace_summary.py: $(grep -m1 -E '^0 +allreduce' "$TMP/summary.out")"
else
    fail "trace_summary.py: unexpected output"
    cat "$TMP/summary.out"
fi

# Split communicators (tests/mp/more.c at 4 ranks splits its world into communicators of
# 2 and of 1 rank): the world keeps t.rank0..3.json, each written by a 4-rank communicator
# (a split's rank 0 once wrote over the world's), and every split writes
# t.comm<tag>.rank<r>.json: no other name.
MORE="$BUILD/tests/mp/more"
if [ -x "$MORE" ]; then
    mkdir -p "$TMP/m"
    RINGLET_TRACE="$TMP/m/t.json" "$RUN" -n 4 --timeout 300 "$MORE" --count 7 >"$TMP/m.out" 2>"$TMP/m.err"
    rc=$?
    if [ $rc = 0 ] && "$PY" - "$TMP/m" <<'EOF'; then
import json, os, re, sys
d = sys.argv[1]
names = sorted(os.listdir(d))
bad = [n for n in names if not re.fullmatch(r"t\.(comm[0-9a-f]{8}\.)?rank[0-9]+\.json", n)]
world = [json.load(open(os.path.join(d, "t.rank%d.json" % r)))["otherData"] for r in range(4)
         if os.path.exists(os.path.join(d, "t.rank%d.json" % r))]
tagged = [n for n in names if n.startswith("t.comm")]
if bad or len(world) != 4 or any(o["nranks"] != 4 or o["rank"] != r for r, o in enumerate(world)) or len(tagged) < 8:
    print("files: %s; world's otherData: %s" % (names, world))
    sys.exit(1)
# sends and receives on host memory are operations too (lane 0, with the peer and the
# bytes): more.c's 8 MiB from world rank 0 to rank 1 (ringlet_isend, ringlet_recv)
def p2p(r, name, peer):
    ev = json.load(open(os.path.join(d, "t.rank%d.json" % r)))["traceEvents"]
    return [e for e in ev if e.get("ph") == "X" and e.get("tid") == 0 and e.get("name") == name
            and e.get("args", {}).get("peer") == peer and e.get("args", {}).get("bytes") == 8 << 20]
if not p2p(0, "send", 1) or not p2p(1, "recv", 0):
    print("no lane-0 span of the 8 MiB send on rank 0 (%d) or of its receive on rank 1 (%d)" % (
        len(p2p(0, "send", 1)), len(p2p(1, "recv", 0))))
    sys.exit(1)
EOF
        pass "4 ranks, split communicators: the world's t.rank0..3.json kept (with the spans of rank 0's send to rank 1 and its receive), $(ls "$TMP/m" | grep -c '^t\.comm') tagged files of the others"
    else
        fail "4 ranks with split communicators under RINGLET_TRACE (launcher exit $rc)"
        tail -n 5 "$TMP/m.out" "$TMP/m.err"
    fi
fi

if [ $fails = 0 ]; then
    echo "trace: all passed"
    exit 0
fi
echo "trace: $fails failed"
exit 1

#!/usr/bin/env python3
"""Where the time goes, from RINGLET_TRACE files.

    perf/trace_summary.py t.rank0.json [t.rank1.json ...]   (or a merged file)

For each rank and each operation name: the total time of its spans (lane "operation"),
and the share of that time during which each lane (send, recv, reduce) had at least one
span open. A reduce lane near 100% means the reduction on the calling thread is what
limits the pipeline; send and recv near 100% with reduce low means the transport is.
Standard library only.
"""
import json
import sys
from collections import defaultdict

LANES = {1: "send", 2: "recv", 3: "reduce"}


def union_length(intervals):
    """Length covered by a list of (start, end) intervals."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def main(paths):
    if not paths:
        print(__doc__.strip())
        return 2
    ops = defaultdict(list)    # (pid, name) -> [(ts, end, seq)]
    lanes = defaultdict(list)  # (pid, seq, lane) -> [(ts, end)]
    for p in paths:
        with open(p) as f:
            doc = json.load(f)
        events = doc["traceEvents"] if isinstance(doc, dict) else doc
        for ev in events:
            if ev.get("ph") != "X":
                continue
            a = ev.get("args", {})
            span = (ev["ts"], ev["ts"] + ev.get("dur", 0))
            if ev["tid"] == 0:
                ops[(ev["pid"], ev["name"])].append(span + (a.get("seq"),))
            elif ev["tid"] in LANES:
                lanes[(ev["pid"], a.get("seq"), ev["tid"])].append(span)
    print("%-5s %-15s %6s %12s %8s %8s %8s" % ("rank", "operation", "calls", "time_us", "send%", "recv%", "reduce%"))
    for (pid, name) in sorted(ops):
        spans = ops[(pid, name)]
        total = sum(e - s for s, e, _ in spans)
        busy = {lane: 0.0 for lane in LANES}
        for s, e, seq in spans:
            for lane in LANES:
                clipped = [(max(a, s), min(b, e)) for a, b in lanes.get((pid, seq, lane), []) if b > s and a < e]
                busy[lane] += union_length(clipped)
        pct = lambda x: 100.0 * x / total if total > 0 else 0.0
        print("%-5d %-15s %6d %12.1f %7.1f%% %7.1f%% %7.1f%%" %
              (pid, name, len(spans), total, pct(busy[1]), pct(busy[2]), pct(busy[3])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

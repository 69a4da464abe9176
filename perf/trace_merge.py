#!/usr/bin/env python3
"""Merge the per-rank Chrome-trace files of RINGLET_TRACE into one timeline.

    perf/trace_merge.py -o merged.json t.rank0.json t.rank1.json ...
    perf/trace_merge.py -o merged.json t.json            # the RINGLET_TRACE name: t.rank*.json
    perf/trace_merge.py -o merged.json 't-%r.json'       # a name with %r: t-*.json
    perf/trace_merge.py -o merged.json 'out/*.json'      # a glob

Open the result in https://ui.perfetto.dev (or chrome://tracing): one process per rank
(pid = rank), lanes "operation", "send", "recv", "reduce".

Every input is checked before anything is written: valid JSON (no NaN/Infinity), the
JSON Object Format ({"traceEvents": [...]}) or a bare event array, every event an
object with "ph", "pid", "tid" (and "ts" except metadata), a complete event ("X") with
a "dur" >= 0, one pid per file equal to otherData.rank, no rank twice. An input that
fails is named with the reason and nothing is written (exit status 1).

Timestamps are the ranks' CLOCK_MONOTONIC microseconds, which agree between processes
of one host. For ranks on several hosts, --align realtime shifts each file by the
difference of its host's wall clock to its monotonic clock (recorded in otherData when
the trace was opened), so the ranks line up as well as the hosts' wall clocks agree.

Only the Python standard library is used.
"""

import argparse
import glob
import json
import math
import os
import sys

PROG = "trace_merge"


class BadTrace(Exception):
    pass


def _no_constant(name):
    raise ValueError("%s is not JSON" % name)


def _is_num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def expand(arg, out_real):
    """The files an argument names: itself, a glob, or the files RINGLET_TRACE=arg wrote."""
    if os.path.isfile(arg):
        return [arg]
    if glob.has_magic(arg):
        pattern = arg
    elif "%r" in arg:
        pattern = "*".join(glob.escape(p) for p in arg.split("%r"))
    else:
        base = arg[:-5] if arg.endswith(".json") else arg
        pattern = glob.escape(base) + ".rank*.json"
    found = [f for f in sorted(glob.glob(pattern)) if os.path.isfile(f) and os.path.realpath(f) != out_real]
    if not found:
        raise BadTrace("%s: no such file, and no file matches %s" % (arg, pattern))
    return found


def load(path):
    """Reads and checks one rank's file; returns (events, otherData, rank)."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read().decode("utf-8"), parse_constant=_no_constant)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise BadTrace("%s: not a valid JSON file: %s" % (path, e))
    if isinstance(doc, list):
        events, other = doc, {}
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events, other = doc["traceEvents"], doc.get("otherData", {})
        if not isinstance(other, dict):
            raise BadTrace("%s: otherData is not an object" % path)
    else:
        raise BadTrace('%s: neither {"traceEvents": [...]} nor an array of events' % path)

    pids = set()
    for n, e in enumerate(events):
        where = "%s: event %d" % (path, n)
        if not isinstance(e, dict):
            raise BadTrace("%s: not an object" % where)
        ph = e.get("ph")
        if not isinstance(ph, str) or not ph:
            raise BadTrace("%s: no ph" % where)
        for key in ("pid", "tid"):
            if not _is_int(e.get(key)):
                raise BadTrace("%s: %s missing or not an integer" % (where, key))
        if ph != "M" and not _is_num(e.get("ts")):
            raise BadTrace("%s: ts missing or not a finite number" % where)
        if ph == "X":
            if not isinstance(e.get("name"), str):
                raise BadTrace("%s: name missing" % where)
            if not _is_num(e.get("dur")) or e["dur"] < 0:
                raise BadTrace("%s: dur missing or negative" % where)
        pids.add(e["pid"])

    rank = other.get("rank")
    if rank is not None and not _is_int(rank):
        raise BadTrace("%s: otherData.rank is not an integer" % path)
    if rank is None:
        if len(pids) != 1:
            raise BadTrace("%s: no otherData.rank and %d pids in the events" % (path, len(pids)))
        rank = next(iter(pids))
    if pids - {rank}:
        raise BadTrace("%s: rank %d but events of pid %s" % (path, rank, sorted(pids - {rank})))
    return events, other, rank


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="trace_merge.py",
        description="Merge RINGLET_TRACE per-rank Chrome-trace files into one (pid = rank).",
        epilog="INPUT: a rank's file, a glob, or the RINGLET_TRACE name (t.json finds t.rank*.json).",
    )
    ap.add_argument("-o", "--output", required=True, help="the merged file to write")
    ap.add_argument(
        "--align",
        choices=("monotonic", "realtime"),
        default="monotonic",
        help="monotonic (default): ts as recorded, right for ranks of one host; "
        "realtime: shift each rank by its host's wall clock, for ranks of several hosts",
    )
    ap.add_argument("-q", "--quiet", action="store_true", help="print only the summary line")
    ap.add_argument("inputs", nargs="+", metavar="INPUT")
    a = ap.parse_args(argv)

    out_real = os.path.realpath(a.output)
    try:
        files, seen = [], set()
        for arg in a.inputs:
            for f in expand(arg, out_real):
                r = os.path.realpath(f)
                if r not in seen:
                    seen.add(r)
                    files.append(f)
        loaded = [(f,) + load(f) for f in files]
    except BadTrace as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return 1

    by_rank = {}
    for f, _, _, rank in loaded:
        if rank in by_rank:
            print("%s: rank %d is in both %s and %s" % (PROG, rank, by_rank[rank], f), file=sys.stderr)
            return 1
        by_rank[rank] = f
    loaded.sort(key=lambda x: x[3])

    shift = {}
    if a.align == "realtime":
        offs = {}
        for f, _, other, rank in loaded:
            off = other.get("realtime_minus_monotonic_us")
            if not _is_num(off):
                print("%s: %s: no otherData.realtime_minus_monotonic_us for --align realtime" % (PROG, f),
                      file=sys.stderr)
                return 1
            offs[rank] = off
        ref = offs[loaded[0][3]]  # keep the numbers small: relative to the first rank's clock
        shift = {r: off - ref for r, off in offs.items()}

    meta, rest = [], []
    dropped = 0
    nranks = set()
    hosts = {}
    for f, events, other, rank in loaded:
        d = shift.get(rank, 0.0)
        for e in events:
            if e["ph"] == "M":
                meta.append(e)
            else:
                if d:
                    e = dict(e, ts=round(e["ts"] + d, 3))
                rest.append(e)
        if _is_int(other.get("dropped")):
            dropped += other["dropped"]
        if _is_int(other.get("nranks")):
            nranks.add(other["nranks"])
        if isinstance(other.get("host"), str):
            hosts[str(rank)] = other["host"]
        if not a.quiet:
            spans = sum(1 for e in events if e["ph"] == "X")
            note = ", %d dropped" % other["dropped"] if other.get("dropped") else ""
            print("  %s: rank %d, %d events (%d spans%s)" % (f, rank, len(events), spans, note))

    meta.sort(key=lambda e: (e["pid"], e["tid"]))
    # by time; at equal ts the longer span first, so that viewers nest them
    rest.sort(key=lambda e: (e["ts"], -e.get("dur", 0), e["pid"], e["tid"]))

    ranks = [x[3] for x in loaded]
    other = {
        "merged_from": [x[0] for x in loaded],
        "ranks": ranks,
        "align": a.align,
        "dropped": dropped,
        "hosts": hosts,
    }
    if len(nranks) == 1:
        other["nranks"] = nranks.pop()
    versions = {x[2].get("version") for x in loaded if isinstance(x[2].get("version"), str)}
    if len(versions) == 1:
        other["version"] = versions.pop()

    tmp = "%s.tmp%d" % (a.output, os.getpid())
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write('{"traceEvents":[\n')
            f.write(",\n".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in meta + rest))
            f.write('\n],\n"displayTimeUnit":"ns",\n"otherData":')
            json.dump(other, f, ensure_ascii=False, separators=(",", ":"))
            f.write("}\n")
        os.replace(tmp, a.output)
    except OSError as e:
        print("%s: cannot write %s: %s" % (PROG, a.output, e), file=sys.stderr)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return 1

    spans = sum(1 for e in rest if e["ph"] == "X")
    print("%s: %d files (ranks %s): %d events (%d spans) -> %s" % (
        PROG, len(loaded), ", ".join(map(str, ranks)), len(meta) + len(rest), spans, a.output))
    if "nranks" in other and len(ranks) != other["nranks"]:
        missing = sorted(set(range(other["nranks"])) - set(ranks))
        print("%s: warning: %d of %d ranks merged (missing: %s)" % (
            PROG, len(ranks), other["nranks"], ", ".join(map(str, missing))), file=sys.stderr)
    if dropped:
        print("%s: warning: %d spans were dropped when recording (RINGLET_TRACE_MAX)" % (PROG, dropped),
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

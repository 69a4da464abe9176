#!/usr/bin/env python3
"""perf/compare_plot.py RESULTS.csv OUT.png [--title TEXT]

The plot of perf/compare: all-reduce busbw against message size, one panel per rank count, one line
per peer (the median of the passes, solid, with markers), the best pass as a lighter marker of the same
colour. Only checked, correct results (check == OK); ringlet's out-of-place form, as in the table.
x: message size on a log2 axis; y: busbw in GB/s on a log axis (small messages are far below large
ones). The 8-byte latency runs (kind == lat) are written under each panel's axis.
Needs matplotlib (Debian: python3-matplotlib); draws with the Agg backend, no display needed.
"""
import argparse
import csv
import statistics
import sys
from collections import defaultdict


def label_size(b):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div}{unit}"
    return f"{b}B"


def fmt_us(v):
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("png")
    ap.add_argument("--title", default="all-reduce float32 sum")
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("compare_plot: no plot: matplotlib is not installed (apt-get install python3-matplotlib)",
              file=sys.stderr)
        return 1

    bw = defaultdict(list)   # (ranks, peer, bytes) -> busbw of each good pass
    lat = defaultdict(list)  # (ranks, peer) -> time_us
    with open(a.csv, newline="") as f:
        for row in csv.DictReader(f):
            if row["check"] != "OK":
                continue
            if row["peer"].startswith("ringlet-") and row["form"] == "ip":
                continue
            r, peer, b = int(row["ranks"]), row["peer"], int(row["bytes"])
            if row["kind"] == "lat":
                lat[(r, peer)].append(float(row["time_us"]))
            elif row["busbw"]:
                bw[(r, peer, b)].append(float(row["busbw"]))
    ranks = sorted({k[0] for k in bw} | {k[0] for k in lat})
    if not ranks:
        print("compare_plot: no checked results to plot", file=sys.stderr)
        return 1
    peers = sorted({k[1] for k in bw} | {k[1] for k in lat}, key=lambda p: (not p.startswith("ringlet"), p))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colour = {p: colours[i % len(colours)] for i, p in enumerate(peers)}

    fig, axes = plt.subplots(1, len(ranks), figsize=(6.5 * len(ranks), 5.2), squeeze=False)
    for ax, r in zip(axes[0], ranks):
        sizes_seen = set()
        for p in peers:
            pts = sorted((b, v) for (rr, pp, b), v in bw.items() if rr == r and pp == p)
            if not pts:
                continue
            xs = [b for b, _ in pts]
            sizes_seen.update(xs)
            style = "-" if p.startswith("ringlet") else "--"
            ax.plot(xs, [statistics.median(v) for _, v in pts], style, marker="o", color=colour[p],
                    label=f"{p} (median)")
            ax.plot(xs, [max(v) for _, v in pts], linestyle="none", marker="^", color=colour[p], alpha=0.35)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ticks = sorted(sizes_seen)
        ax.set_xticks(ticks)
        ax.set_xticklabels([label_size(b) for b in ticks])
        ax.minorticks_off()
        lat_r = [f"{p} {fmt_us(statistics.median(lat[(r, p)]))}" for p in peers if (r, p) in lat]
        xlabel = "message size (bytes)"
        if lat_r:  # the 8-byte latency under the axis, three peers a line
            rows = [", ".join(lat_r[i:i + 3]) for i in range(0, len(lat_r), 3)]
            xlabel += "\n8 B latency, median (us): " + "\n".join(rows)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("busbw (GB/s) = algbw x 2(n-1)/n")
        ax.set_title(f"{r} ranks (lines: median; light triangles: best pass)")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(a.title, fontsize=9)
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)
    print(f"compare_plot: wrote {a.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

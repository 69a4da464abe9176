#!/usr/bin/env python3
"""perf/compare_cluster_plot.py SUMMARY.csv OUT.png --rate-bits BITS [--mtu 1500] [--title TEXT]

The plot of perf/compare --cluster: one panel per cluster shape (H hosts x L ranks), one group of bars
per message size, one bar per row (ringlet-ring, ringlet-hier, ringlet-auto, Open MPI): the median
busbw of the passes (checked results only), a black tick at the best pass, and over each bar its share
of its own link bound and its ratio to Open MPI. Horizontal lines: the ring's bound R (the link rate),
hier's bound R x (P-1)H / (P(H-1)), and the TCP payload ceiling of each (x (MTU-52)/(MTU+14)).
busbw in GB/s (1e9 B/s) = algbw x 2(P-1)/P. Reads summary.csv as perf/compare_cluster writes it.
Needs matplotlib (Debian: python3-matplotlib); draws with the Agg backend, no display needed.
"""
import argparse
import csv
import sys
import textwrap


def label_size(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


def num(s):
    return float(s) if s not in ("", None) else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("summary")
    ap.add_argument("png")
    ap.add_argument("--rate-bits", type=float, required=True, help="link rate, bits/s per direction")
    ap.add_argument("--mtu", type=int, default=1500)
    ap.add_argument("--title", default="all-reduce float32 sum, simulated cluster")
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("compare_cluster_plot: no plot: matplotlib is not installed (apt-get install python3-matplotlib)",
              file=sys.stderr)
        return 1

    rows = []
    with open(a.summary, newline="") as f:
        for r in csv.DictReader(f):
            rows.append(r)
    shapes = []
    for r in rows:
        s = (int(r["hosts"]), int(r["per_host"]))
        if s not in shapes:
            shapes.append(s)
    if not shapes:
        print("compare_cluster_plot: no rows to plot", file=sys.stderr)
        return 1
    order = {"ringlet-ring": 0, "ringlet-hier": 1, "ringlet-auto": 2}
    peers = sorted({r["peer"] for r in rows}, key=lambda p: (order.get(p, 3 if p.startswith("ringlet") else 4), p))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colour = {p: colours[i % len(colours)] for i, p in enumerate(peers)}
    R = a.rate_bits / 8 / 1e9
    pay = (a.mtu - 52) / (a.mtu + 14)

    fig, axes = plt.subplots(1, len(shapes), figsize=(6.2 * len(shapes), 5.4), squeeze=False)
    for ax, (H, L) in zip(axes[0], shapes):
        P = H * L
        hier = R * (P - 1) * H / (P * (H - 1))
        mine = [r for r in rows if int(r["hosts"]) == H and int(r["per_host"]) == L]
        sizes = sorted({int(r["bytes"]) for r in mine})
        width = 0.8 / max(1, len(peers))
        top = hier
        for pi, p in enumerate(peers):
            for si, b in enumerate(sizes):
                r = next((x for x in mine if x["peer"] == p and int(x["bytes"]) == b), None)
                if r is None:
                    continue
                med, best = num(r["median"]), num(r["best"])
                x = si - 0.4 + width * (pi + 0.5)
                name = "Open MPI (tcp,vader)" if p == "mpi" else p
                if med is None:
                    ax.text(x, 0, "no result", rotation=90, ha="center", va="bottom", fontsize=7)
                    continue
                ax.bar(x, med, width * 0.9, color=colour[p], label=name if si == 0 else None)
                if best is not None:
                    ax.plot([x - width * 0.35, x + width * 0.35], [best, best], color="black", lw=1)
                    top = max(top, best)
                share, ratio = num(r["share"]), num(r["ratio_mpi"])
                txt = []
                if share is not None:
                    txt.append(f"{100 * share:.0f}%")
                if ratio is not None and p != "mpi":
                    txt.append(f"x{ratio:.1f}")
                ax.text(x, max(med, best or 0) + 0.01 * hier, "\n".join(txt), ha="center", va="bottom", fontsize=7)
        for y, text in ((R, "ring bound R"), (hier, f"hier bound {hier / R:.3g} R")):
            ax.axhline(y, color="grey", linestyle="--", lw=0.9)
            ax.axhline(y * pay, color="grey", linestyle=":", lw=0.9)
            ax.text(len(sizes) - 0.45, y, " " + text, va="bottom", ha="left", fontsize=7, color="dimgrey")
        ax.plot([], [], color="grey", linestyle="--", lw=0.9, label="link bound (wire bytes)")
        ax.plot([], [], color="grey", linestyle=":", lw=0.9, label=f"x TCP payload share {100 * pay:.1f}%")
        ax.set_xticks(range(len(sizes)))
        ax.set_xticklabels([label_size(b) for b in sizes])
        ax.set_xlim(-0.5, len(sizes) - 0.5 + 0.55)
        ax.set_ylim(0, top * 1.45)
        ax.set_xlabel("message size; over each bar: share of its own link bound, and x Open MPI")
        ax.set_ylabel("busbw (GB/s) = algbw x 2(P-1)/P")
        ax.set_title(f"{H} hosts x {L} ranks (P = {P}); links {R * 8:.3g} Gbit/s each way\n"
                     "bars: median of the passes; black tick: best pass", fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", ncol=2)
    fig.suptitle(textwrap.fill(a.title, 85 * len(shapes)), fontsize=9)
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)
    print(f"compare_cluster_plot: wrote {a.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

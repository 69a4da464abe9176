#!/usr/bin/env bash
# Host-memory speed of this tree against an earlier commit, measured side by side in one
# run: did a change slow the host path down?
#
#   perf/ab_compare.sh [-r REV] [-p passes] [-n "2 4"]
#
# Builds REV (default: the parent of HEAD, HEAD~1) in a temporary worktree (CUDA=0, -O2),
# then runs, per pass, per rank count and transport (shm, tcp), alternating A (REV) and
# B (this tree, which must be built; each first in every other pass), both on host memory: ringlet-perf allreduce float32 at 64 MiB (busbw) and
# at 8 bytes (microseconds per call, 20000 calls after as many warm-up calls, blocking: a
# short run right after init measures where the scheduler left the ranks, not ringlet).
# Prints the medians of the passes and B/A for each. Every result is checked, in place and
# out of place (#wrong must be 0, and the run must succeed).
set -u
cd "$(dirname "$0")/.." || exit 1
REV=HEAD~1 PASSES=3 NPS="2 4"
while getopts "r:p:n:h" o; do
    case $o in
    r) REV=$OPTARG ;;
    p) PASSES=$OPTARG ;;
    n) NPS=$OPTARG ;;
    *) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    esac
done
BUILD=${BUILD:-build}
[ -x "$BUILD/bin/ringlet-perf" ] || { echo "ab_compare: build this tree first (make)"; exit 1; }
WT=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-ab.XXXXXX")
CSV=$(mktemp)
trap 'git worktree remove --force "$WT" >/dev/null 2>&1; rm -rf "$WT" "$CSV"' EXIT
git worktree add -q --detach "$WT" "$REV" || exit 1
echo "ab_compare: building $REV ($(git rev-parse --short "$REV")) in $WT"
make -C "$WT" -j"$(nproc)" CUDA=0 BUILD=build lib build/bin/ringlet-run build/bin/ringlet-perf >/dev/null 2>&1 ||
    { echo "ab_compare: building $REV failed"; exit 1; }
A="$WT/build" B="$BUILD"
# one run: the out-of-place time (us) and busbw of rank 0's last row, and the wrong
# elements of both forms ("x" when the run failed). Host memory on both sides
# (RINGLET_DEVICE=none: a tree built with CUDA would otherwise time device buffers).
one() { # build P transport bytes iters [warm-up calls]
    local out rc
    out=$(RINGLET_DEVICE=none RINGLET_TRANSPORT=$3 "$1/bin/ringlet-run" -n "$2" --timeout 300 "$1/bin/ringlet-perf" \
        allreduce -b "$4" -e "$4" -n "$5" -w "${6:-50}" 2>&1)
    rc=$?
    grep -E '^\[0\] +[0-9]+ ' <<<"$out" | tail -n 1 | awk -v rc=$rc '{print $7, $9, (rc == 0 ? $10 + $14 : "x")}'
}
for pass in $(seq 1 "$PASSES"); do
    for P in $NPS; do
        for tr in shm tcp; do
            order="A B"
            [ $((pass % 2)) = 0 ] && order="B A" # each side first in every other pass
            for side in $order; do
                dir=$A
                [ $side = B ] && dir=$B
                read -r t bw w < <(one "$dir" "$P" "$tr" 64M 10)
                echo "$side,$P,$tr,64M,$bw,$w" >>"$CSV"
                read -r t bw w < <(one "$dir" "$P" "$tr" 8 20000 20000)
                echo "$side,$P,$tr,8B,$t,$w" >>"$CSV"
            done
        done
    done
    echo "  pass $pass done"
done
python3 - "$CSV" "$REV" <<'EOF'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
bad = [r for r in rows if r[5] not in ("0",)]
med = {}
for side, P, tr, what, v, w in rows:
    try: med.setdefault((side, int(P), tr, what), []).append(float(v))
    except ValueError: pass
med = {k: statistics.median(v) for k, v in med.items()}
print("\n| ranks | transport | 64 MiB busbw A (%s) | B (this tree) | B/A | 8 B all-reduce us A | B | B/A |" % sys.argv[2])
print("|---|---|---|---|---|---|---|---|")
for (side, P, tr, what) in sorted(k for k in med if k[0] == "A" and k[3] == "64M"):
    a, b = med[("A", P, tr, "64M")], med.get(("B", P, tr, "64M"), 0)
    la, lb = med.get(("A", P, tr, "8B"), 0), med.get(("B", P, tr, "8B"), 0)
    print("| %d | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |" % (P, tr, a, b, b / a if a else 0, la, lb, lb / la if la else 0))
print("\nmedians of the passes; busbw in GB/s (higher is better), 8-byte time in us (lower is better)")
if bad: print("WRONG RESULTS (or failed runs) in %d runs" % len(bad))
sys.exit(1 if bad else 0)
EOF

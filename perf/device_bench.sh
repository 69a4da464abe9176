#!/usr/bin/env bash
# Device buffers against host buffers, and against PyTorch's Gloo on CUDA tensors, in one run:
# the goals of the GPU data path (issue "The GPU data path, part 1").
#
#   perf/device_bench.sh [-p passes] [-n "2 4"] [-s 64M] [-t "tcp shm"] [-o dir]
#
# Per pass (passes interleave, so a slow moment of the machine hits every column alike), per
# rank count and transport: ringlet-perf allreduce, float32 sum, size -s, with -M host and with
# -M device (the device layer's backend: cuda on a GPU; RINGLET_DEVICE=sim otherwise, set here
# when no GPU is usable). With CUDA and PyTorch: perf/torch_gloo_bench.py --device cuda at the
# same size and rank count. Every result is checked (#wrong must be 0).
# Prints the median busbw (GB/s) of the passes per column and the ratios the goals name:
#   GPU:  device >= 70% of host (tcp and shm); device tcp >= 4x PyTorch Gloo on CUDA
#   sim:  device time <= 3x host time (the simulator copies every chunk through pinned slots
#         with stream threads: more than 3x means something is serialised)
# Writes the table to DIR/table.txt and every measurement to DIR/results.csv (default DIR:
# build/device_bench). Exit 0 when every run ran and checked; 1 otherwise (goals are
# reported, not enforced). Environment: BUILD (default build), PYTHON (the python with torch,
# for the Gloo column; default /usr/bin/python3).
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
PASSES=3 NPS="2 4" SIZE=64M TRS="tcp shm" OUTDIR=""
while getopts "p:n:s:t:o:h" opt; do
    case $opt in
    p) PASSES=$OPTARG ;;
    n) NPS=$OPTARG ;;
    s) SIZE=$OPTARG ;;
    t) TRS=$OPTARG ;;
    o) OUTDIR=$OPTARG ;;
    *) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    esac
done
OUTDIR=${OUTDIR:-$BUILD/device_bench}
mkdir -p "$OUTDIR"
RUN="$BUILD/bin/ringlet-run" PERF="$BUILD/bin/ringlet-perf"
for f in "$RUN" "$PERF"; do [ -x "$f" ] || { echo "device_bench: $f not found (make first)"; exit 1; }; done

gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then gpu=1; fi
if [ $gpu = 0 ] && [ -z "${RINGLET_DEVICE:-}" ]; then export RINGLET_DEVICE=sim; fi
backend=${RINGLET_DEVICE:-auto}
torch_cuda=0
PY=${PYTHON:-/usr/bin/python3} # the python with torch (on the GPU machine: python3)
if [ $gpu = 1 ] && "$PY" -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    torch_cuda=1
fi
CSV="$OUTDIR/results.csv"
echo "pass,nranks,transport,memory,busbw_GBps,wrong" >"$CSV"
echo "device_bench: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, GPU: $([ $gpu = 1 ] && nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 || echo none), device backend: $backend, commit $(git rev-parse --short HEAD 2>/dev/null || echo ?), size $SIZE, $PASSES passes"

failed=0
# one ringlet-perf run: its out-of-place busbw and #wrong (rank 0's row)
perf_run() { # P transport memory
    local out
    out=$(RINGLET_TRANSPORT=$2 "$RUN" -n "$1" --timeout 600 "$PERF" allreduce -b "$SIZE" -e "$SIZE" -n 10 -w 2 \
        -M "$3" 2>&1)
    local row
    row=$(grep -E '^\[0\] +[0-9]+ ' <<<"$out" | tail -n 1)
    if [ -z "$row" ]; then
        echo "device_bench: ringlet-perf P=$1 $2 -M $3 failed:" >&2
        tail -n 15 <<<"$out" >&2
        failed=1
        echo "0 -1"
        return
    fi
    awk '{print $9, $10}' <<<"$row"
}

for pass in $(seq 1 "$PASSES"); do
    for P in $NPS; do
        for tr in $TRS; do
            for mem in host device; do
                read -r bw wrong < <(perf_run "$P" "$tr" "$mem")
                [ "$wrong" != 0 ] && failed=1
                echo "$pass,$P,$tr,$mem,$bw,$wrong" >>"$CSV"
                echo "  pass $pass P=$P $tr $mem: busbw $bw GB/s, #wrong $wrong"
            done
        done
        if [ $torch_cuda = 1 ]; then
            out=$("$PY" perf/torch_gloo_bench.py -n "$P" --device cuda -b "$SIZE" -e "$SIZE" 2>&1)
            bw=$(awk '$1 == "torch_cuda" && $7 == "OK" {print $5}' <<<"$out" | tail -n 1)
            [ -z "$bw" ] && { echo "device_bench: torch_gloo_bench failed:" >&2; tail -n 10 <<<"$out" >&2; bw=0; failed=1; }
            echo "$pass,$P,gloo,torch_cuda,$bw,0" >>"$CSV"
            echo "  pass $pass P=$P PyTorch Gloo on CUDA tensors: busbw $bw GB/s"
        fi
    done
done

/usr/bin/python3 - "$CSV" "$gpu" "$backend" <<'EOF' | tee "$OUTDIR/table.txt"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
gpu = sys.argv[2] == "1"
med = {}
for r in rows:
    med.setdefault((int(r["nranks"]), r["transport"], r["memory"]), []).append(float(r["busbw_GBps"]))
med = {k: statistics.median(v) for k, v in med.items()}
print("\n| ranks | transport | host busbw | device busbw | device / host |" + (" PyTorch Gloo CUDA | device / Gloo |" if gpu else ""))
print("|---|---|---|---|---|" + ("---|---|" if gpu else ""))
goals = []
for (P, tr, mem), bw in sorted(med.items()):
    if mem != "host": continue
    d = med.get((P, tr, "device"), 0.0)
    ratio = d / bw if bw else 0.0
    line = "| %d | %s | %.2f | %.2f | %.2f |" % (P, tr, bw, d, ratio)
    if gpu:
        g = med.get((P, "gloo", "torch_cuda"), 0.0)
        line += " %.2f | %s |" % (g, "%.1fx" % (d / g) if g else "-")
        if tr == "tcp" and g:
            goals.append(("P=%d device tcp >= 4x PyTorch Gloo on CUDA" % P, d / g >= 4.0, "%.1fx" % (d / g)))
        goals.append(("P=%d device %s >= 70%% of host" % (P, tr), ratio >= 0.70, "%.0f%%" % (100 * ratio)))
    else:
        goals.append(("P=%d %s: simulated device time <= 3x host time" % (P, tr), ratio >= 1 / 3.0,
                      "%.2fx the host's time" % (1 / ratio if ratio else float("inf"))))
    print(line)
print("\nbusbw: median of the passes, GB/s (1e9 B/s), all-reduce float32 sum, out of place; device backend %s" % sys.argv[3])
for name, ok, val in goals:
    print("%-4s %s: %s" % ("PASS" if ok else "MISS", name, val))
EOF
exit $failed

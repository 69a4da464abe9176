#!/usr/bin/env bash
# The CUDA IPC goals on one GPU (issue "The GPU data path, part 2"), in one run, with and
# without MPS: several ranks on the one GPU, device buffers, no transport forced (so
# cuda_ipc between them).
#
#   perf/ipc_bench.sh [-p passes] [-n "2 4"] [-s 256M] [-o dir] [-m "off on"]
#
# Per MPS mode (off, and on when nvidia-cuda-mps-control is here) and pass:
#   BW  the cudaMemcpy device-to-device bandwidth (bytes read + written per second) and the
#       8-byte D2D round trip, from gpu_kernels_bench (built here with nvcc if missing);
#   ringlet-perf -M device, 256 MiB float32: allreduce, allgather, reducescatter, broadcast
#       at each rank count (busbw, out of place); allreduce of 8 bytes at 2 ranks (us), and
#       the same on host memory over shared memory, for comparison.
# Memory floors (busbw when the GPU's memory bandwidth is the only limit; the issue's
# accounting: a reduce step reads two chunks and writes one, a copy step reads one and
# writes one, every byte of every rank through the one GPU's memory):
#   allreduce 2 BW / (5 P)   reducescatter BW / (3 P)   allgather BW / (2 P)
#   broadcast BW / (2 (P - 1)) (a chain: every hop copies the whole buffer)
# Goals: allreduce >= 60% of its floor at P = 2 and 4 (with and without MPS); the others at
# least the allreduce's fraction of their own floors; 8-byte allreduce <= 20 us with MPS.
# Writes DIR/table.txt and DIR/results.csv (default DIR: build/ipc_bench).
# Exit 77 (SKIP) without a GPU; 1 if a run failed or checked wrong; goals are reported.
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
PASSES=3 NPS="2 4" SIZE=256M OUTDIR="" MODES="off on"
while getopts "p:n:s:o:m:h" o; do
    case $o in
    p) PASSES=$OPTARG ;;
    n) NPS=$OPTARG ;;
    s) SIZE=$OPTARG ;;
    o) OUTDIR=$OPTARG ;;
    m) MODES=$OPTARG ;;
    *) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    esac
done
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no GPU"
    exit 77
fi
OUTDIR=${OUTDIR:-$BUILD/ipc_bench}
mkdir -p "$OUTDIR"
RUN="$BUILD/bin/ringlet-run" PERF="$BUILD/bin/ringlet-perf"
for f in "$RUN" "$PERF"; do [ -x "$f" ] || { echo "ipc_bench: $f not found (make first)"; exit 1; }; done
KB="$BUILD/tests/gpu/gpu_kernels_bench"
if [ ! -x "$KB" ]; then
    NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
    mkdir -p "$BUILD/tests/gpu"
    "$NVCC" -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -Iinclude -Ikernels perf/gpu_kernels_bench.cu \
        kernels/reduce_cuda.cu kernels/reduce_cpu.c -o "$KB" || { echo "ipc_bench: cannot build $KB"; exit 1; }
fi
export RINGLET_DEVICE=cuda
CSV="$OUTDIR/results.csv"
echo "mode,pass,what,nranks,value" >"$CSV"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
echo "ipc_bench: $(date -u '+%Y-%m-%d %H:%M UTC'), $gpu, $(nproc) cores, commit $(git rev-parse --short HEAD 2>/dev/null), $PASSES passes, $SIZE"
failed=0

perf_col() { # P memory coll bytes column(7 time, 9 busbw)
    local out row
    out=$("$RUN" -n "$1" --timeout 600 "$PERF" "$3" -b "$4" -e "$4" -M "$2" -n "$( [ "$4" = 8 ] && echo 2000 || echo 10)" \
        -w "$( [ "$4" = 8 ] && echo 200 || echo 3)" 2>&1)
    row=$(grep -E '^\[0\] +[0-9]+ ' <<<"$out" | tail -n 1)
    if [ -z "$row" ] || [ "$(awk '{print $10}' <<<"$row")" != 0 ]; then
        echo "ipc_bench: ringlet-perf $3 P=$1 -M $2 $4 failed or wrong:" >&2
        tail -n 12 <<<"$out" >&2
        failed=1
        echo 0
        return
    fi
    awk -v c="$5" '{print $c}' <<<"$row"
}

mps_dir=""
for mode in $MODES; do
    if [ "$mode" = on ]; then
        command -v nvidia-cuda-mps-control >/dev/null 2>&1 || { echo "ipc_bench: no nvidia-cuda-mps-control: MPS rows left out"; continue; }
        mps_dir=$(mktemp -d)
        export CUDA_MPS_PIPE_DIRECTORY="$mps_dir/pipe" CUDA_MPS_LOG_DIRECTORY="$mps_dir/log"
        mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
        nvidia-cuda-mps-control -d || { echo "ipc_bench: MPS did not start"; continue; }
    fi
    for pass in $(seq 1 "$PASSES"); do
        kb=$("$KB" --mib 256 --reps 5 2>&1)
        bw=$(awk '/^cudaMemcpy D2D/ {print $5}' <<<"$kb" | head -n 1)
        rt=$(sed -n 's/^8-byte cudaMemcpy D2D round trip.*: \([0-9.]*\) us/\1/p' <<<"$kb")
        echo "$mode,$pass,bw,1,${bw:-0}" >>"$CSV"
        echo "$mode,$pass,d2d_rt_us,1,${rt:-0}" >>"$CSV"
        for P in $NPS; do
            for coll in allreduce allgather reducescatter broadcast; do
                v=$(perf_col "$P" device "$coll" "$SIZE" 9)
                echo "$mode,$pass,$coll,$P,$v" >>"$CSV"
            done
        done
        echo "$mode,$pass,lat8_device_us,2,$(perf_col 2 device allreduce 8 7)" >>"$CSV"
        echo "$mode,$pass,lat8_host_shm_us,2,$(perf_col 2 host allreduce 8 7)" >>"$CSV"
        echo "  MPS $mode pass $pass done (BW $bw GB/s)"
    done
    if [ "$mode" = on ]; then
        echo quit | nvidia-cuda-mps-control
        unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
        rm -rf "$mps_dir"
    fi
done

/usr/bin/python3 - "$CSV" <<'EOF' | tee "$OUTDIR/table.txt"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = {}
for r in rows:
    med.setdefault((r["mode"], r["what"], int(r["nranks"])), []).append(float(r["value"]))
med = {k: statistics.median(v) for k, v in med.items()}
floors = {"allreduce": lambda bw, P: 2 * bw / (5 * P), "reducescatter": lambda bw, P: bw / (3 * P),
          "allgather": lambda bw, P: bw / (2 * P), "broadcast": lambda bw, P: bw / (2 * (P - 1))}
for mode in sorted({k[0] for k in med}):
    bw = med.get((mode, "bw", 1), 0)
    print("\nMPS %s: cudaMemcpy D2D BW %.0f GB/s (read + written), 8-byte D2D round trip %.2f us" %
          (mode, bw, med.get((mode, "d2d_rt_us", 1), 0)))
    print("| collective | ranks | busbw GB/s | floor GB/s | fraction | goal |")
    print("|---|---|---|---|---|---|")
    ranks = sorted({k[2] for k in med if k[0] == mode and k[1] == "allreduce"})
    for P in ranks:
        ar = med[(mode, "allreduce", P)] / floors["allreduce"](bw, P) if bw else 0
        for coll in ("allreduce", "reducescatter", "allgather", "broadcast"):
            v = med.get((mode, coll, P), 0)
            fl = floors[coll](bw, P) if bw else 0
            frac = v / fl if fl else 0
            need = 0.60 if coll == "allreduce" else ar
            print("| %s | %d | %.1f | %.1f | %.0f%% | %s >= %.0f%% |" % (coll, P, v, fl, 100 * frac,
                  "PASS" if frac >= need else "MISS", 100 * need))
    lat = med.get((mode, "lat8_device_us", 2), 0)
    print("8-byte allreduce, 2 ranks, device buffers: %.2f us%s; host shared memory: %.2f us" %
          (lat, (" (goal <= 20 us with MPS: %s)" % ("PASS" if lat <= 20 else "MISS")) if mode == "on" else "",
           med.get((mode, "lat8_host_shm_us", 2), 0)))
EOF
exit $failed

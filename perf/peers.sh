#!/usr/bin/env bash
# perf/peers.sh [PASSES] - ringlet against Open MPI and Gloo, all-reduce of 64 MiB float32 sum.
#
# Builds the peer drivers of ../shared/peers (or $RINGLET_PEERS) into build/peers/, then
# runs, for each pass and for 2 and 4 ranks, interleaved:
#   ringlet-perf allreduce -b 64M -e 64M    RINGLET_TRANSPORT=tcp, through ringlet-run
#   Open MPI over TCP (btl tcp,self on lo)
#   Open MPI shared memory (btl vader,self)
#   Gloo AllreduceRingChunked over TCP (run_gloo.sh ... chunked)
# and prints one table: peer, ranks, best and median busbw (GB/s) at 64 MiB.
#
# The peer drivers cannot run one size alone; they run every size of their list up to
# max_bytes (we pass 64 MiB) and we take the 64 MiB row.
#
# Environment (all optional):
#   PASSES=3          passes (also the first argument)
#   RANKS="2 4"       rank counts
#   TARGET_S=1.0      seconds per size for the peer drivers (their own iteration rule)
#   PERF_ITERS=20 PERF_WARMUP=5 PERF_CHECK=1   ringlet-perf -n, -w, -c
#   RINGLET_TRANSPORTS="tcp"   transports to run ringlet with (one ringlet row pair each)
#   TIMEOUT_S=600     limit per run
#   MPI_ARGS=""       extra mpirun arguments (e.g. "--mca btl_vader_single_copy_mechanism none")
#   BUILD=build       the build folder of the repository (ringlet-run, ringlet-perf)
#   RINGLET_PEERS     where the peer sources are
# Logs of every run: build/peers/logs/.
set -u -o pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
PEERS="${RINGLET_PEERS:-$(dirname "$0")/../../shared/peers}"
PEERS="$(cd "$PEERS" 2>/dev/null && pwd)" || { echo "peers.sh: no peer sources at ${RINGLET_PEERS:-$HERE/../../shared/peers}" >&2; exit 1; }
PASSES="${1:-${PASSES:-3}}"
RANKS="${RANKS:-2 4}"
TARGET_S="${TARGET_S:-1.0}"
PERF_ITERS="${PERF_ITERS:-20}"
PERF_WARMUP="${PERF_WARMUP:-5}"
PERF_CHECK="${PERF_CHECK:-1}"
TRANSPORTS="${RINGLET_TRANSPORTS:-tcp}"
TIMEOUT_S="${TIMEOUT_S:-600}"
MPI_ARGS="${MPI_ARGS:-}"
BUILD_DIR="$ROOT/${BUILD:-build}"
OUT="$ROOT/build/peers"
SIZE=67108864

case "$PASSES" in '' | *[!0-9]* | 0) echo "usage: $0 [PASSES>=1]" >&2; exit 1 ;; esac

mkdir -p "$OUT/bin" "$OUT/logs"
LOGS="$OUT/logs"
rm -f "$LOGS"/*.log

# ---- build the peer drivers (as in the peers README, without -march=native) ----
build() { # build OUTPUT SOURCE command...
    local out="$1" src="$2"
    shift 2
    if [[ -x "$out" && "$out" -nt "$src" ]]; then return 0; fi
    echo "+ $*" >&2
    "$@" || { echo "peers.sh: building $out failed" >&2; return 1; }
}
have_mpi=1 have_gloo=1
build "$OUT/bin/physlimits" "$PEERS/physlimits.c" \
    gcc -O3 -Wall -o "$OUT/bin/physlimits" "$PEERS/physlimits.c" -lpthread || true
build "$OUT/bin/mpi_allreduce_bench" "$PEERS/mpi_allreduce_bench.c" \
    mpicc -O2 -Wall -o "$OUT/bin/mpi_allreduce_bench" "$PEERS/mpi_allreduce_bench.c" || have_mpi=0
build "$OUT/bin/gloo_allreduce_bench" "$PEERS/gloo_allreduce_bench.cc" \
    g++ -O3 -std=c++17 -Wall -o "$OUT/bin/gloo_allreduce_bench" "$PEERS/gloo_allreduce_bench.cc" -lgloo -lpthread ||
    have_gloo=0
# run_gloo.sh finds its binary in bin/ next to itself: run a copy that sits next to ours
cp "$PEERS/run_gloo.sh" "$OUT/run_gloo.sh" && chmod +x "$OUT/run_gloo.sh" || have_gloo=0

have_ringlet=1
if [[ ! -x "$BUILD_DIR/bin/ringlet-perf" || ! -x "$BUILD_DIR/bin/ringlet-run" ]]; then
    echo "peers.sh: $BUILD_DIR/bin/ringlet-perf or ringlet-run missing (run make); ringlet rows skipped" >&2
    have_ringlet=0
fi

MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
RESULTS="$OUT/results.txt"
: >"$RESULTS"

record() { # record KEY RANKS VALUE-or-empty LOG
    local v="$3"
    [[ -z "$v" ]] && { v="x"; echo "    (no 64 MiB result; see $4)" >&2; }
    printf '%s|%s|%s\n' "$1" "$2" "$v" >>"$RESULTS"
}

run_ringlet() { # run_ringlet N PASS TRANSPORT
    local n="$1" p="$2" tr="$3" log="$LOGS/ringlet-$3-n$1-p$2.log"
    RINGLET_TRANSPORT="$tr" timeout -k 5 "$TIMEOUT_S" "$BUILD_DIR/bin/ringlet-run" -n "$n" \
        "$BUILD_DIR/bin/ringlet-perf" allreduce -b 64M -e 64M -d float -o sum \
        -n "$PERF_ITERS" -w "$PERF_WARMUP" -c "$PERF_CHECK" >"$log" 2>&1
    local rc=$?
    # rank 0's row, with ringlet-run's "[0] " prefix; #wrong must be 0 (or N/A)
    local row
    row="$(sed -E 's/^\[[0-9]+\] ?//' "$log" | awk -v s="$SIZE" '$1 == s && $3 == "float" && NF >= 13 {print; exit}')"
    local oop="" ip=""
    if [[ $rc -eq 0 && -n "$row" ]]; then
        # busbw from the size and time columns (more digits than the busbw column's %6.2f)
        oop="$(awk -v n="$n" '($9 == "0" || $9 == "N/A") && $6 > 0 {printf "%.3f", $1 / ($6 * 1e3) * 2 * (n - 1) / n}' <<<"$row")"
        ip="$(awk -v n="$n" '($13 == "0" || $13 == "N/A") && $10 > 0 {printf "%.3f", $1 / ($10 * 1e3) * 2 * (n - 1) / n}' <<<"$row")"
    else
        echo "    ringlet ($tr) exit status $rc" >&2
    fi
    record "ringlet-$tr-oop" "$n" "$oop" "$log"
    record "ringlet-$tr-ip" "$n" "$ip" "$log"
    echo "  pass $p ranks $n ringlet $tr: out-of-place ${oop:-FAIL}, in-place ${ip:-FAIL} GB/s" >&2
}

run_mpi() { # run_mpi N PASS tcp|vader
    local n="$1" p="$2" kind="$3" log="$LOGS/mpi-$3-n$1-p$2.log" btl=()
    if [[ "$kind" == tcp ]]; then
        btl=(--mca pml ob1 --mca btl "tcp,self" --mca btl_tcp_if_include lo)
    else
        btl=(--mca pml ob1 --mca btl "vader,self")
    fi
    # shellcheck disable=SC2086 # MPI_ARGS is a list of words
    timeout -k 5 "$TIMEOUT_S" "${MPIRUN[@]}" -np "$n" "${btl[@]}" $MPI_ARGS \
        "$OUT/bin/mpi_allreduce_bench" "$TARGET_S" "$SIZE" >"$log" 2>&1
    local rc=$? v=""
    # columns: bytes time_us algbw_GBps busbw_GBps iters check
    [[ $rc -eq 0 ]] && v="$(awk -v s="$SIZE" '$1 == s && $6 == "OK" {print $4; exit}' "$log")"
    [[ $rc -ne 0 ]] && echo "    mpirun ($kind) exit status $rc" >&2
    record "mpi-$kind" "$n" "$v" "$log"
    echo "  pass $p ranks $n Open MPI $kind: ${v:-FAIL} GB/s" >&2
}

run_gloo() { # run_gloo N PASS
    local n="$1" p="$2" log="$LOGS/gloo-chunked-n$1-p$2.log"
    # arguments: ranks target_s algos max_bytes max_call_s (a high max_call_s: never SKIP 64 MiB)
    GLOO_TIMEOUT_S="$TIMEOUT_S" timeout -k 10 "$TIMEOUT_S" "$OUT/run_gloo.sh" "$n" "$TARGET_S" chunked "$SIZE" 60 \
        >"$log" 2>&1
    local rc=$? v=""
    # columns: algo bytes time_us algbw_GBps busbw_GBps iters check
    [[ $rc -eq 0 ]] && v="$(awk -v s="$SIZE" '$1 == "chunked" && $2 == s && $7 == "OK" {print $5; exit}' "$log")"
    [[ $rc -ne 0 ]] && echo "    run_gloo.sh exit status $rc" >&2
    record "gloo-chunked" "$n" "$v" "$log"
    echo "  pass $p ranks $n Gloo chunked: ${v:-FAIL} GB/s" >&2
}

echo "peers.sh: $PASSES passes, ranks: $RANKS, $(nproc) CPUs on $(hostname), $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
for ((p = 1; p <= PASSES; p++)); do
    for n in $RANKS; do
        if ((have_ringlet)); then for tr in $TRANSPORTS; do run_ringlet "$n" "$p" "$tr"; done; fi
        if ((have_mpi)); then
            run_mpi "$n" "$p" tcp
            run_mpi "$n" "$p" vader
        fi
        if ((have_gloo)); then run_gloo "$n" "$p"; fi
    done
done

# ---- the table ----
label() {
    case "$1" in
    ringlet-*-oop) echo "ringlet, ${1#ringlet-}" | sed -E 's/-oop$/ (out-of-place)/' ;;
    ringlet-*-ip) echo "ringlet, ${1#ringlet-}" | sed -E 's/-ip$/ (in-place)/' ;;
    mpi-tcp) echo "Open MPI, TCP" ;;
    mpi-vader) echo "Open MPI, shared memory (vader)" ;;
    gloo-chunked) echo "Gloo AllreduceRingChunked, TCP" ;;
    *) echo "$1" ;;
    esac
}
keys=()
for tr in $TRANSPORTS; do keys+=("ringlet-$tr-oop" "ringlet-$tr-ip"); done
keys+=(mpi-tcp mpi-vader gloo-chunked)

echo
echo "# all-reduce, 64 MiB float32 sum, busbw = algbw x 2(n-1)/n in GB/s (1e9 B/s)"
echo "# best / median of $PASSES interleaved passes; runs = passes with a checked 64 MiB result"
printf '%-40s %5s %8s %8s %6s\n' "peer" "ranks" "best" "median" "runs"
for key in "${keys[@]}"; do
    for n in $RANKS; do
        vals="$(awk -F'|' -v k="$key" -v n="$n" '$1 == k && $2 == n {print $3}' "$RESULTS")"
        [[ -z "$vals" ]] && continue
        total="$(wc -l <<<"$vals")"
        good="$(grep -v '^x$' <<<"$vals" | sort -g || true)"
        if [[ -z "$good" ]]; then
            printf '%-40s %5s %8s %8s %6s\n' "$(label "$key")" "$n" "-" "-" "0/$total"
            continue
        fi
        read -r best median cnt < <(awk '{a[NR] = $1} END {
            m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2;
            printf "%.3f %.3f %d\n", a[NR], m, NR }' <<<"$good")
        printf '%-40s %5s %8s %8s %6s\n' "$(label "$key")" "$n" "$best" "$median" "$cnt/$total"
    done
done

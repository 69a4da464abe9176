#!/usr/bin/env bash
# perf/p2p_compare.sh - point-to-point ping-pong, ringlet against Open MPI, in one run:
# perf/p2p_pingpong.c (ringlet_send / ringlet_recv) over shared memory and TCP, and
# perf/mpi_pingpong.c (MPI_Send / MPI_Recv) over vader and TCP (ob1, loopback), 2 ranks each
# bound to a core (ringlet-run --bind cores; mpirun binds 2 ranks so), interleaved round by
# round. Prints per transport and size the median one-way time of each over the rounds and
# the ratio Open MPI's / ringlet's (above 1: ringlet is faster).
#
#   make && perf/p2p_compare.sh          # about a minute on 2 vCPUs
#
# Environment: ROUNDS (3), SIZES ("8 65536 1048576 16777216"), TARGET_S (0.3 per size and
# run), OUT (build/p2p: the drivers and each run's output), BASE (the build folder of another
# checkout: its libringlet is measured too, in the same rounds, as column "base").
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
ROUNDS="${ROUNDS:-3}" SIZES="${SIZES:-8 65536 1048576 16777216}" TARGET_S="${TARGET_S:-0.3}"
OUT="${OUT:-$ROOT/build/p2p}" BASE="${BASE:-}"
read -ra SZ <<<"$SIZES"
mkdir -p "$OUT"
rm -f "$OUT"/{ringlet,base,mpi}-{shm,tcp}-*.txt # a run's medians are over its own rounds only
[[ -x "$ROOT/build/bin/ringlet-run" && -f "$ROOT/build/lib/libringlet.so" ]] || { echo "p2p_compare: run make first" >&2; exit 1; }
cc -O2 -Wall -I"$ROOT/include" -o "$OUT/p2p_pingpong" "$HERE/p2p_pingpong.c" -L"$ROOT/build/lib" -lringlet
HAVE_MPI=0
if command -v mpicc >/dev/null && mpicc -O2 -Wall -o "$OUT/mpi_pingpong" "$HERE/mpi_pingpong.c" 2>"$OUT/mpicc.log"; then HAVE_MPI=1
else echo "p2p_compare: no Open MPI (mpicc): ringlet only (scripts/install-deps.sh peers installs it)" >&2; fi
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 2 --mca pml ob1)

# run NAME TRANSPORT ROUND: one run's "bytes one_way_us ..." lines into $OUT/NAME-TRANSPORT-ROUND.txt
run() {
    local name=$1 tp=$2 r=$3 f="$OUT/$1-$2-$3.txt"
    case $name in
    ringlet | base)
        local lib="$ROOT/build/lib"
        [[ $name == base ]] && lib="$BASE/lib"
        LD_LIBRARY_PATH="$lib" RINGLET_TRANSPORT=$tp timeout 300 "$ROOT/build/bin/ringlet-run" -n 2 --bind cores -- \
            "$OUT/p2p_pingpong" "$TARGET_S" "${SZ[@]}" 2>&1 | sed -n 's/^\[0\] //p' | grep -E '^ *[0-9]' >"$f" || true ;;
    mpi)
        local btl=(--mca btl 'vader,self')
        [[ $tp == tcp ]] && btl=(--mca btl 'tcp,self' --mca btl_tcp_if_include lo)
        timeout 300 "${MPIRUN[@]}" "${btl[@]}" "$OUT/mpi_pingpong" "$TARGET_S" "${SZ[@]}" 2>&1 | grep -E '^ *[0-9]' >"$f" || true ;;
    esac
}

NAMES=(ringlet)
[[ -n $BASE ]] && NAMES+=(base)
((HAVE_MPI)) && NAMES+=(mpi)
for r in $(seq "$ROUNDS"); do
    for tp in shm tcp; do
        for name in "${NAMES[@]}"; do run "$name" "$tp" "$r"; done
    done
    echo "round $r of $ROUNDS done" >&2
done

# median NAME TRANSPORT SIZE: the median one-way time over the rounds ("-" if none)
median() {
    cat "$OUT/$1-$2-"*.txt 2>/dev/null | awk -v s="$3" '$1 == s { print $2 }' | sort -g |
        awk '{ v[NR] = $1 } END { if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
printf '# p2p ping-pong, 2 ranks, one-way time in us (median of %s rounds), %s\n' "$ROUNDS" "$(date -u '+%Y-%m-%d %H:%M UTC')"
printf '# commit %s%s\n' "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')" "${BASE:+, base: $BASE}"
printf '%-4s %10s %10s %10s %10s %12s\n' tp bytes ringlet base "Open MPI" "MPI/ringlet"
fail=0
for tp in shm tcp; do
    for s in "${SZ[@]}"; do
        a=$(median ringlet $tp "$s") b=$( [[ -n $BASE ]] && median base $tp "$s" || echo "") m=$( ((HAVE_MPI)) && median mpi $tp "$s" || echo "-")
        [[ $a == - ]] && fail=1
        ratio=$(awk -v a="$a" -v m="$m" 'BEGIN { if (a == "-" || m == "-" || a <= 0) print "-"; else printf "%.2f", m / a }')
        printf '%-4s %10s %10s %10s %10s %12s\n' $tp "$s" "$a" "${b:--}" "$m" "$ratio"
    done
done
exit $fail

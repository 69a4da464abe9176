#!/usr/bin/env bash
# perf/compare's report (--report) on a run made up here, whose figures are known: the
# section "passes in the same placement only" keeps each pass's pair of runs only where both
# had the CPUs in the same state (core_rtt both under 200 ns, or both at or over it), and its
# worst ratio is that of the medians over those passes; a pair with no such pass says '-'.
# The goal over every pass is printed as before. Needs no build and no peer.
# Exit 0 = passed, 1 = a failure.
set -u
cd "$(dirname "$0")/../.."
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-compare-report.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
cat >"$TMP/meta.sh" <<'META'
declare -- META_DATE="2026-12-02T08:00:00Z"
declare -- META_HOST="test"
declare -- META_NPROC="2"
declare -- META_CPU="cpu"
declare -- META_COMMIT="0000000"
declare -- META_KERNEL="Linux"
declare -- META_MEM="1 GiB"
declare -- PASSES="3"
declare -- RANKS="2"
declare -- HOG="0"
declare -- BIND="cores"
declare -a ringlet_list=([0]="ringlet-shm" [1]="ringlet-tcp")
declare -a peer_list=([0]="mpi-shm" [1]="mpi-tcp")
declare -A MISSING=()
declare -- DEFAULT="ringlet-shm"
declare -- LAT_B="8"
declare -- ELAPSED="1"
declare -- TRANSPORTS="shm tcp"
declare -- TARGET_S="0.2"
declare -a size_list=([0]="4096" [1]="1048576")
META
# busbw by pass: ringlet-shm's passes 1-2 apart, 3 together; mpi-shm's 2 apart, 1 and 3
# together: passes 2 and 3 match. Over them: 4 KiB (4+8)/2 / (2+4)/2 = 2.00, 1 MiB
# (3+9)/2 / (4+4)/2 = 1.50, the worst. Over every pass: 8/2 = 4.00 and 9/4 = 2.25.
# ringlet-tcp always together, mpi-tcp always apart: no pass matches.
{
    echo "pass,ranks,peer,bytes,time_us,busbw,check,form,kind,iters"
    row() { echo "$1,2,$2,$3,1.0,$4,OK,oop,bw,10"; }
    row 1 ringlet-shm 4096 10; row 2 ringlet-shm 4096 4; row 3 ringlet-shm 4096 8
    row 1 ringlet-shm 1048576 10; row 2 ringlet-shm 1048576 3; row 3 ringlet-shm 1048576 9
    row 1 mpi-shm 4096 1; row 2 mpi-shm 4096 2; row 3 mpi-shm 4096 4
    row 1 mpi-shm 1048576 1; row 2 mpi-shm 1048576 4; row 3 mpi-shm 1048576 4
    for p in 1 2 3; do
        row $p ringlet-tcp 4096 1; row $p ringlet-tcp 1048576 1
        row $p mpi-tcp 4096 2; row $p mpi-tcp 1048576 2
    done
} >"$TMP/results.csv"
{
    echo "pass,ranks,peer,core_rtt_ns"
    echo "1,2,ringlet-shm,450"; echo "2,2,ringlet-shm,460"; echo "3,2,ringlet-shm,60"
    echo "1,2,mpi-shm,60"; echo "2,2,mpi-shm,470"; echo "3,2,mpi-shm,65"
    for p in 1 2 3; do echo "$p,2,ringlet-tcp,61"; echo "$p,2,mpi-tcp,500"; done
} >"$TMP/placement.csv"
# The thresholds this test expects, whatever the caller's environment says.
env PLACE_APART_NS=200 EVERY_SHM_MPI_MIN=1.0 PLOT_PYTHON=none perf/compare --report "$TMP" >"$TMP/out" 2>&1
rc=$?
fails=0
check() { # what pattern
    if grep -qE "$2" "$TMP/out"; then echo "ok:   $1"; else fails=$((fails + 1)); echo "FAIL: $1 (no line matching: $2)"; fi
}
[ $rc = 0 ] || { fails=$((fails + 1)); echo "FAIL: perf/compare --report exited $rc"; }
check "shm: passes 2 (apart) and 3 (together) match, worst 1.50 at 1 MiB" \
    "^  2 ranks: ringlet-shm / mpi-shm +passes 2A,3T +worst 1\.50 \(at 1 MiB\)$"
check "tcp: no pass in the same placement" "^  2 ranks: ringlet-tcp / mpi-tcp +passes - +worst -$"
check "the goal over every pass stays: worst 2.25 at 1 MiB" \
    "2 ranks, every size: worst ringlet-shm / mpi-shm \(at 1 MiB\)(, gaps)? +2\.25 +PASS"
if [ $fails != 0 ]; then
    echo "----- the report:"
    cat "$TMP/out"
    echo "compare_report: $fails failed"
    exit 1
fi
echo "compare_report: all passed"

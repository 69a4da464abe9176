#!/usr/bin/env bash
# The InfiniBand/RoCE verbs transport (transports/ib.c).
#
# On the host (no RDMA device needed):
#   - libringlet.so links neither libibverbs nor librdmacm (ldd), and references no verbs
#     symbol (everything goes through dlopen);
#   - with the verbs library hidden (RINGLET_IB_LIBDIR=/nonexistent) and with
#     RINGLET_IB_DISABLE=1, the IB transport reports itself unavailable at INFO and a
#     2-rank job runs over TCP; RINGLET_TRANSPORT=ib then fails at init with that reason.
# In ONE boot of the Soft-RoCE VM (../shared/rdma-vm/run-in-rdma-vm.sh beside the repository, or
# $RINGLET_RDMA_VM), this script runs itself with --guest there:
#   - ibv_devinfo;
#   - tests/mp/ib_transport (the transport alone: sizes 0 B .. 4 MiB + 3, credits, zero-copy
#     source, length and channel mismatch, peer closing, stop, no credits, a stranger's handshake),
#     with the defaults and with 3 QPs per peer and 3 slots of 4 KiB;
#   - tests/mp/collectives with RINGLET_TRANSPORT=ib at P = 2, 3, 4 (every collective,
#     every dtype x op incl. float32/int32 all ops and bfloat16 sum, counts 0, 1, P-1,
#     P+1 in place and out of place, blocking and not, random data, exact check; large
#     counts as listed in PLAN below), and at P = 3 on device memory over the simulated
#     GPU (chunks staged through pinned slots, over verbs);
#   - tests/mp/tcp_inline --first-exchange at P = 4 over ib (receives posted before the
#     sends between ranks with no connection yet);
#   - a rank SIGKILLed during an allreduce (rank 2, and rank 0) and an allgather, P = 4
#     (tests/mp/kill, as kill.sh, with 32 MiB: the VM is slow and has 2 GiB);
#   - the benchmark: ringlet-perf allreduce at 2 ranks, 4 MiB, RINGLET_TRANSPORT=ib, and
#     perftest's ib_write_bw -d rxe0 at 4 MiB on the same rxe0, alternated twice; prints
#     both (MiB/s, 2^20 bytes, as perftest) and the ratio of the best of each. The ratio
#     is reported, not enforced: the VM is emulated (TCG) on a shared machine.
# Sanitizer builds (SANITIZE=...) use smaller counts (P = 4 with --quick), leave out the
# second P = 2 row, and skip the benchmark. RINGLET_RDMA_VM overrides the VM script.
# Exit 0 = passed, 1 = failed, 77 = skipped (no VM script, or the VM cannot boot).
# About 5-6 minutes on a 2-core machine (one VM boot of ~30 s included).
set -u
cd "$(dirname "$0")/../.." || exit 1

BUILD=${BUILD:-build}
# The VM's CPU is emulated; with ThreadSanitizer on top, one pass would take most of CI's
# time. The IB tests run in the normal and the ASan+UBSan builds.
if [[ "${SANITIZE:-}" == *thread* ]]; then
    echo "SKIP: IB tests in the emulated RDMA VM are not run under ThreadSanitizer (too slow); they run in the normal and ASan builds"
    exit 77
fi
# The VM script sits in shared/ beside the repository (as in CI's clone), or at /work/shared.
VM=${RINGLET_RDMA_VM:-$(cd "$(dirname "$0")/../.." && pwd)/../shared/rdma-vm/run-in-rdma-vm.sh}
[ -x "$VM" ] || [ -n "${RINGLET_RDMA_VM:-}" ] || VM=/work/shared/rdma-vm/run-in-rdma-vm.sh
RUN="$BUILD/bin/ringlet-run"
COLL="$BUILD/tests/mp/collectives"
KILL="$BUILD/tests/mp/kill"
UNIT="$BUILD/tests/mp/ib_transport"
PERF="$BUILD/bin/ringlet-perf"
fails=0
now_ms() { echo $(($(date +%s%N) / 1000000)); }
secs() { local d=$(($(now_ms) - $1)); echo "$((d / 1000)).$((d % 1000 / 100)) s"; }
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

# ------------------------------------------------------------------ inside the VM
guest() {
    local DEV=${RDMAVM_DEV:-rxe0} IP=${RDMAVM_IP:-192.0.2.1} TMP t rc
    TMP=$(mktemp -d /tmp/ringlet-ib.XXXXXX)
    export RINGLET_TIMEOUT=60

    echo "===== ibv_devinfo -d $DEV"
    ibv_devinfo -d "$DEV" | grep -E 'hca_id|transport|state|mtu|link_layer|port:' || fail "ibv_devinfo"

    echo "===== the transport alone (tests/mp/ib_transport)"
    for envs in "" "RINGLET_IB_QPS_PER_PEER=3 RINGLET_IB_NSLOTS=3 RINGLET_IB_SLOT_SIZE=4096"; do
        t=$(now_ms)
        # shellcheck disable=SC2086
        env $envs timeout 180 "$UNIT" --addr "$IP" >"$TMP/unit" 2>&1
        rc=$?
        if [ $rc = 0 ]; then
            echo "ok:   ib_transport ${envs:-(defaults)}: $(grep -c '^ok:' "$TMP/unit") cases, $(secs "$t")"
        else
            fail "ib_transport ${envs:-(defaults)}: exit status $rc"
            tail -n 40 "$TMP/unit"
        fi
    done
    sed -n 's/^ok: \(length mismatch\|channel mismatch\|receiver closed\|no credits\)/      \1/p' "$TMP/unit"

    echo "===== device, port and GID selection (2 ranks, RINGLET_TRANSPORT=ib, RINGLET_DEBUG=INFO)"
    sel() { # expect(ok|fail) pattern env...
        local want=$1 pat=$2
        shift 2
        env "$@" RINGLET_TRANSPORT=ib RINGLET_DEBUG=INFO "$RUN" -n 2 --timeout 120 "$COLL" --max-count 0 --quick \
            --colls allreduce,sendrecv >"$TMP/out" 2>&1
        rc=$?
        local line
        line=$(grep -m1 -oE "$pat" "$TMP/out")
        if { [ "$want" = ok ] && [ $rc = 0 ]; } || { [ "$want" = fail ] && [ $rc != 0 ]; }; then
            if [ -n "$line" ]; then
                echo "ok:   ${*:-(defaults)}: $line"
                return
            fi
        fi
        fail "${*:-(defaults)}: exit status $rc, want $want with '$pat'"
        tail -n 15 "$TMP/out"
    }
    sel ok "ib: $DEV port 1 \(RoCE, MTU [0-9]+\), GID [0-9]+ ::ffff:$IP \(RoCE v2[^)]*\)"
    sel ok "ib: $DEV port 1 \(RoCE, MTU [0-9]+\), GID 0 [^ ]+ \([^)]*\)" RINGLET_IB_GID_INDEX=0
    sel ok "ib: $DEV port 1 .*" "RINGLET_IB_HCA==$DEV:1"
    sel fail "ib: no active port selected by RINGLET_IB_HCA=\^$DEV" "RINGLET_IB_HCA=^$DEV"
    sel fail "ib: no active port selected by RINGLET_IB_HCA=$DEV:2" "RINGLET_IB_HCA=$DEV:2"
    # fork() and registered memory: protected where the kernel needs it (ib_verbs.c)
    sel ok "ib: fork protection (unneeded|on) [^;]*"
    # GIDs that cannot reach each other (rank 0 the IPv6 link-local GID 0, rank 1 the IPv4
    # one): refused at the connection, naming both, not sends failing seconds later
    printf '#!/bin/sh\n[ "$RANK" = 0 ] && export RINGLET_IB_GID_INDEX=0\nexec "$@"\n' >"$TMP/gid0.sh"
    chmod +x "$TMP/gid0.sh"
    t=$(now_ms)
    RINGLET_TRANSPORT=ib "$RUN" -n 2 --timeout 120 "$TMP/gid0.sh" "$COLL" --max-count 0 --quick --colls allreduce \
        >"$TMP/out" 2>&1
    rc=$?
    line=$(grep -m1 -oE "ib: rank [01]'s GID [^ ]+ \(RoCE v2\) and this rank's [^ ]+ \(RoCE v2, index [0-9]+\) are an IPv4 and an IPv6 address" "$TMP/out")
    if [ $rc != 0 ] && [ -n "$line" ]; then
        echo "ok:   rank 0 on GID 0 (IPv6), rank 1 on its IPv4 GID: refused in $(secs "$t"): $line"
    else
        fail "GIDs of two address families: exit status $rc, no message naming both"
        grep -v ' INFO: ' "$TMP/out" | tail -n 15
    fi

    echo "===== collectives, RINGLET_TRANSPORT=ib"
    # P|environment|arguments. Every run checks all 10 dtypes x 5 ops at counts 0, 1, P-1,
    # P+1, every variant. Large counts (L) rotate the variant over collective x dtype x op
    # (--phase 1 starts at the other in-place variant); RINGLET_CHUNK_SIZE and small IB
    # slots make the medium counts span many chunks and wrap the FIFO many times.
    # Sanitizer builds (SANITIZE set, as make test SANITIZE=... does) run smaller counts.
    # (The ASan build leaves out the second P = 2 row, the other in-place variant of the
    # same path, and takes a smaller count on device buffers: 60 s of emulated CPU there.)
    local L2=1048579 L3=65537 L4=131075 LD=65537 Q="" Q4="" PHASE1=1
    case "${SANITIZE:-}" in
    *thread*) L2=65537 L3=16411 L4=16411 LD=16411 Q=--quick ;;
    ?*) L2=262147 L3=65537 L4=65537 LD=16411 Q4=--quick PHASE1= ;;
    esac
    local PLAN="2||--max-count $L2 $Q
${PHASE1:+2||--max-count $L2 --phase 1 --colls allreduce $Q}
3|RINGLET_CHUNK_SIZE=16384 RINGLET_IB_SLOT_SIZE=4096 RINGLET_IB_NSLOTS=4 RINGLET_IB_QPS_PER_PEER=2|--max-count $L3 $Q
4|RINGLET_CHECK=1|--max-count $L4 $Q ${Q4:-}
3|RINGLET_DEVICE=sim RINGLET_CHUNK_SIZE=16384 RINGLET_SIM_JITTER=50|--memory device --max-count $LD --quick"
    local P envs args good name
    while IFS='|' read -r P envs args; do
        [ -n "$P" ] || continue
        t=$(now_ms)
        # shellcheck disable=SC2086
        env RINGLET_TRANSPORT=ib $envs "$RUN" -n "$P" --timeout 400 "$COLL" $args >"$TMP/out" 2>"$TMP/err"
        rc=$?
        good=$(grep -cE "^\[[0-9]+\] collectives: rank [0-9]+ of $P: [1-9][0-9]* cases checked, 0 failed" "$TMP/out")
        name="P=$P $args${envs:+ ($envs)}"
        if [ $rc = 0 ] && [ "$good" = "$P" ]; then
            echo "ok:   $name: $(sed -n "s/^\[0\] collectives: rank 0 of $P: \([0-9]*\) cases checked.*/\1/p" "$TMP/out") cases per rank, $(secs "$t")"
        else
            fail "$name: launcher exit status $rc, $good of $P ranks passed"
            grep -E 'FAIL|collectives: rank' "$TMP/out" | head -n 30
            tail -n 15 "$TMP/err"
        fi
    done <<<"$PLAN"

    echo "===== first messages between ranks not yet connected, RINGLET_TRANSPORT=ib, P = 4"
    # tests/mp/tcp_inline --first-exchange (any transport): every rank posts its receives
    # from all others, then its sends, on fresh communicators; a receive waits for its
    # sender's connection without holding up this rank's sends.
    t=$(now_ms)
    RINGLET_TRANSPORT=ib "$RUN" -n 4 --timeout 300 "$BUILD/tests/mp/tcp_inline" --first-exchange 1 >"$TMP/out" 2>&1
    rc=$?
    good=$(grep -cE "tcp_inline: rank [0-9]+ of 4: [1-9][0-9]* checks, 0 failed" "$TMP/out")
    if [ $rc = 0 ] && [ "$good" = 4 ]; then
        echo "ok:   irecv from all, then isend / blocking send to all: $(grep -m1 -oE '[0-9]+ checks' "$TMP/out") per rank, $(secs "$t")"
    else
        fail "first exchanges over ib: launcher exit status $rc, $good of 4 ranks passed"
        grep -E 'FAIL|tcp_inline: rank' "$TMP/out" | head -n 30
    fi

    echo "===== a rank killed mid-collective, RINGLET_TRANSPORT=ib, P = 4"
    local MARK="ringlet_ib_kill_$$"
    # As kill.sh: the victim dies by the library's fault injection before its N-th send of
    # the collective (32 MiB, 512 KiB chunks: 16 per all-reduce segment at P = 4).
    kill_case() { # victim collective at
        local v=$1 coll=$2 at=$3 n r line ok=1
        rm -rf "$TMP/sync" && mkdir "$TMP/sync"
        t=$(now_ms)
        RINGLET_TRANSPORT=ib RINGLET_TIMEOUT=5 RINGLET_CHUNK_SIZE=512K "$RUN" -n 4 --grace 20 --timeout 90 "$KILL" \
            --victim "$v" --coll "$coll" --at "$at" --sync "$TMP/sync" --mib 32 --tag "$MARK" >"$TMP/out" 2>"$TMP/err"
        rc=$?
        [ $rc = 137 ] || { ok=0; echo "      launcher exit status $rc, want 137"; }
        grep -qE "^\[$v\] .*fault injection: SIGKILL in $coll #2 before posting" "$TMP/out" "$TMP/err" ||
            { ok=0; echo "      the victim did not log the fault injection inside the $coll"; }
        n=$(grep -cE '^\[[0-9]+\] survivor [0-9]+: OK ' "$TMP/out")
        [ "$n" = 3 ] || { ok=0; echo "      $n survivor OK lines, want 3"; }
        for r in 0 1 2 3; do
            [ "$r" = "$v" ] && continue
            line=$(grep -E "^\[$r\] survivor $r: OK error in [0-9.]+ s: " "$TMP/out" | head -n 1)
            case "$line" in
            *"rank $v"*"$coll"* | *"$coll"*"rank $v"*) ;;
            *) ok=0; echo "      survivor $r: no OK line naming rank $v and $coll" ;;
            esac
        done
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            pgrep -f "$MARK" >/dev/null || break
            sleep 0.3
        done
        if pgrep -f "$MARK" >/dev/null; then
            ok=0
            echo "      processes left behind"
            pkill -KILL -f "$MARK"
        fi
        if [ $ok = 1 ]; then
            echo "ok:   rank $v killed during $coll at $at, $(secs "$t")"
            grep -E 'survivor [0-9]+: OK' "$TMP/out" | sed 's/^/      /'
        else
            fail "rank $v killed during $coll at $at"
            cat "$TMP/out" "$TMP/err" | tail -n 30
        fi
    }
    kill_case 2 allreduce send:1
    kill_case 0 allreduce send:49
    kill_case 3 allgather send:1

    if [ -n "${SANITIZE:-}" ]; then # a ratio under a sanitizer says nothing
        rm -rf "$TMP"
        [ $fails = 0 ] && echo "guest: all passed (no benchmark under SANITIZE=$SANITIZE)" || echo "guest: $fails failed"
        [ $fails = 0 ]
        return
    fi
    echo "===== benchmark: 4 MiB, ringlet allreduce at 2 ranks (busbw) vs ib_write_bw on $DEV"
    local best_bw=0 best_rl=0 v
    bw_once() {
        local try
        timeout 60 ib_write_bw -d "$DEV" -s 4194304 -D 3 -F >"$TMP/bw_srv" 2>&1 &
        # the client connects once, and fails at once while the server is not listening yet:
        # tried again (the server waits for one client) rather than after a guessed delay
        for try in $(seq 40); do
            v=$(timeout 60 ib_write_bw -d "$DEV" -s 4194304 -D 3 -F "$IP" 2>"$TMP/bw_err" | awk '/^ *4194304 / {print $4}')
            [ -n "$v" ] || ! kill -0 $! 2>/dev/null && break
            sleep 0.25
        done
        wait
        if [ -z "$v" ]; then
            fail "ib_write_bw gave no number"
            cat "$TMP/bw_err" "$TMP/bw_srv" | tail -n 10
            v=0
        fi
        echo "      ib_write_bw -d $DEV -s 4194304 -D 3: $v MiB/s"
        best_bw=$(awk -v a="$best_bw" -v b="$v" 'BEGIN {print (b > a) ? b : a}')
    }
    rl_once() {
        RINGLET_TRANSPORT=ib "$RUN" -n 2 --timeout 120 "$PERF" allreduce -b 4M -e 4M -n 10 -w 3 >"$TMP/perf" 2>&1
        rc=$?
        # busbw = algbw * 2(P-1)/P = algbw at P = 2; time column in us, both forms
        v=$(awk '/^\[0\] +4194304 / {a = 4194304 / $7 / 1.048576; b = 4194304 / $11 / 1.048576;
                 printf "%.1f %.1f", a, b}' "$TMP/perf")
        if [ $rc != 0 ] || [ -z "$v" ]; then
            fail "ringlet-perf: exit status $rc"
            tail -n 20 "$TMP/perf"
            return
        fi
        grep -E '^\[0\] +4194304 ' "$TMP/perf" | sed 's/^/      /'
        echo "      ringlet allreduce 4 MiB, 2 ranks, busbw: out of place ${v% *} MiB/s, in place ${v#* } MiB/s"
        best_rl=$(awk -v a="$best_rl" -v b="${v% *}" -v c="${v#* }" 'BEGIN {m = a; if (b > m) m = b; if (c > m) m = c; print m}')
    }
    bw_once
    rl_once
    bw_once
    rl_once
    echo "RESULT: ringlet allreduce busbw $best_rl MiB/s, ib_write_bw $best_bw MiB/s (best of each), ratio" \
        "$(awk -v a="$best_rl" -v b="$best_bw" 'BEGIN {if (b > 0) printf "%.0f%%", 100 * a / b; else print "?"}')"

    rm -rf "$TMP"
    [ $fails = 0 ] && echo "guest: all passed" || echo "guest: $fails failed"
    [ $fails = 0 ]
}

if [ "${1:-}" = "--guest" ]; then
    guest
    exit $?
fi

# ------------------------------------------------------------------ on the host
for f in "$RUN" "$COLL" "$KILL" "$UNIT" "$PERF" "$BUILD/lib/libringlet.so"; do
    if [ ! -e "$f" ]; then
        echo "FAIL: $f not found (build first, or set BUILD)"
        exit 1
    fi
done
T0=$(now_ms)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-ib.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

echo "===== host: no link-time dependency on rdma-core"
if ldd "$BUILD/lib/libringlet.so" | grep -E 'libibverbs|librdmacm'; then
    fail "libringlet.so links rdma-core"
else
    echo "ok:   ldd $BUILD/lib/libringlet.so: no libibverbs, no librdmacm"
fi
if nm -D --undefined-only "$BUILD/lib/libringlet.so" 2>/dev/null | grep -E ' (ibv_|rdma_)'; then
    fail "libringlet.so references verbs symbols"
else
    echo "ok:   no undefined ibv_*/rdma_* symbol"
fi

echo "===== host: verbs library hidden -> TCP"
# shared memory off: these ranks share a host, and TCP is what ranks on two hosts fall back to
for hide in "RINGLET_IB_LIBDIR=/nonexistent" "RINGLET_IB_DISABLE=1"; do
    env "$hide" RINGLET_SHM_DISABLE=1 RINGLET_DEBUG=INFO "$RUN" -n 2 --timeout 120 "$COLL" --max-count 1000 --quick >"$TMP/out" 2>"$TMP/err"
    rc=$?
    good=$(grep -cE '^\[[0-9]+\] collectives: rank [0-9]+ of 2: [1-9][0-9]* cases checked, 0 failed' "$TMP/out")
    why=$(grep -m1 'transport ib unavailable' "$TMP/err" | sed 's/.*INFO: //')
    if [ $rc = 0 ] && [ "$good" = 2 ] && [ -n "$why" ] && grep -q 'over tcp' "$TMP/err"; then
        echo "ok:   $hide: collectives over TCP passed; logged: $why"
    else
        fail "$hide: exit status $rc, $good of 2 ranks passed, ib message '${why}'"
        tail -n 20 "$TMP/err"
    fi
    env "$hide" RINGLET_TRANSPORT=ib "$RUN" -n 2 --timeout 60 "$COLL" --max-count 0 --colls barrier >"$TMP/out" 2>&1
    rc=$?
    if [ $rc != 0 ] && grep -q 'init.*ib: ' "$TMP/out"; then
        echo "ok:   $hide RINGLET_TRANSPORT=ib: init fails: $(grep -m1 -o 'init.*ib: .*' "$TMP/out")"
    else
        fail "$hide RINGLET_TRANSPORT=ib: exit status $rc, no clear init error"
        tail -n 10 "$TMP/out"
    fi
done

echo "===== Soft-RoCE VM"
if [ ! -x "$VM" ]; then
    echo "host checks: $fails failed"
    echo "SKIP: no RDMA VM script ($VM); the verbs data path was not tested"
    [ $fails = 0 ] && exit 77
    exit 1
fi
# The guest sees this directory read-write and runs this very script. The VM emulates its
# CPU and shares this machine's cores with everything else running: its deadline only
# catches a hang (the guest's own runs have their own, shorter ones), so it is generous.
RDMAVM_TIMEOUT=${RDMAVM_TIMEOUT:-1500} "$VM" "BUILD='$BUILD' bash tests/mp/ib.sh --guest" 2>&1 | tee "$TMP/guest"
rc=${PIPESTATUS[0]}
# 125 is the VM's "could not boot", but also its "the guest gave no status": once the
# guest's first section printed, the guest ran, and a 125 is its crash (a failure).
if [ "$rc" = 125 ] && grep -q '^===== ' "$TMP/guest"; then
    fail "the guest started its checks but gave no status (exit 125: it crashed or was killed)"
    rc=0
elif [ "$rc" = 125 ]; then
    echo "host checks: $fails failed"
    echo "SKIP: the RDMA VM could not boot (exit 125); the verbs data path was not tested"
    [ $fails = 0 ] && exit 77
    exit 1
fi
[ "$rc" = 0 ] || fail "the VM run exited with status $rc$([ "$rc" = 124 ] && echo ' (RDMAVM_TIMEOUT)')"
if [ $fails = 0 ]; then
    echo "ib: all passed ($(secs "$T0"))"
    exit 0
fi
echo "ib: $fails failed ($(secs "$T0"))"
exit 1

#!/usr/bin/env bash
# Shared memory when /dev/shm fills up after init (tests/mp/shm_full.c): 3 ranks over
# RINGLET_TRANSPORT=shm in a private mount namespace whose /dev/shm is a 32 MiB tmpfs;
# rank 0 fills it to the last page after init. Every page ringlet touches from then on must
# have been reserved (a sparse page of a full tmpfs is SIGBUS at its first touch): the
# doorbell's board pages (all-reduces of 16 KiB), and the FIFO a receive polls before its
# sender has connected (that receive fails cleanly, saying /dev/shm is full). Then 2 ranks,
# rank 1 alone in a mount namespace with its own /dev/shm: taken for two hosts (TCP). Then
# 2 ranks under a file size limit below the segment's size (ulimit -f).
# Needs root (unshare -m); skips (77) otherwise. Exit 0 = passed, 1 = failed.
set -u
BUILD=${BUILD:-build}
RUN="$BUILD/bin/ringlet-run"
PROG="$BUILD/tests/mp/shm_full"
for f in "$RUN" "$PROG"; do [ -x "$f" ] || { echo "FAIL: $f not found (build first)"; exit 1; }; done
if [ "$(id -u)" != 0 ] || ! unshare -m sh -c 'mount -t tmpfs -o size=1m tmpfs /dev/shm' 2>/dev/null; then
    echo "SKIP: needs root and a tmpfs mount in a mount namespace, for a private /dev/shm (unshare -m)"
    exit 77
fi
OUT=$(mktemp "${TMPDIR:-/tmp}/ringlet-shm-full.XXXXXX")
trap 'rm -f "$OUT"' EXIT
RINGLET_TRANSPORT=shm RINGLET_TIMEOUT=30 unshare -m bash -c \
    'mount -t tmpfs -o size=32m tmpfs /dev/shm && exec "$0" -n 3 --timeout 120 --grace 10 "$1"' "$RUN" "$PROG" >"$OUT" 2>&1
rc=$?
fails=0
n=$(grep -cE "shm_full: rank [0-9] of 3: [1-9][0-9]* checks, 0 failed" "$OUT")
if [ "$rc" = 0 ] && [ "$n" = 3 ]; then
    echo "ok:   3 ranks, /dev/shm full after init: $(grep -m1 -oE '[0-9]+ checks' "$OUT") per rank"
    grep "receive with /dev/shm full" "$OUT" | sed 's/^/      /'
else
    echo "FAIL: 3 ranks, /dev/shm full after init: launcher exit status $rc, $n of 3 ranks passed"
    tail -n 30 "$OUT"
    fails=1
fi
# Two ranks of one machine, rank 1 with a /dev/shm of its own (a container with the host's
# name but not its IPC, say): they are told apart as two hosts and talk over TCP (they were
# taken for one host, and init failed opening each other's shared memory).
RINGLET_TIMEOUT=30 "$RUN" -n 2 --timeout 120 --grace 10 sh -c \
    'if [ "$RANK" = 1 ]; then exec unshare -m sh -c "mount -t tmpfs -o size=32m tmpfs /dev/shm && exec \"\$0\"" "$0"; fi; exec "$0"' \
    "$BUILD/tests/mp/shm_probe" >"$OUT" 2>&1
rc=$?
if [ "$rc" = 0 ] && [ "$(grep -c 'shm_probe: rank .: OK' "$OUT")" = 2 ]; then
    echo "ok:   rank 1 with a /dev/shm of its own: the all-reduce went over TCP, right"
else
    echo "FAIL: rank 1 with a /dev/shm of its own: launcher exit status $rc"
    tail -n 20 "$OUT"
    fails=1
fi
# A file size limit (ulimit -f) under the segment's size (a FIFO per rank of the job: 4 MiB
# for 2 ranks): forced, shm fails init on both ranks naming the limit; by default the ranks
# go over TCP. The segment's ftruncate was SIGXFSZ, which killed the rank.
RINGLET_TRANSPORT=shm RINGLET_TIMEOUT=30 "$RUN" -n 2 --timeout 120 --grace 10 sh -c \
    'ulimit -f 2048 && exec "$0"' "$BUILD/tests/mp/shm_probe" >"$OUT" 2>&1
rc=$?
if [ "$rc" != 0 ] && [ "$(grep -c 'FAIL: .*RLIMIT_FSIZE' "$OUT")" = 2 ] && ! grep -q 'signal' "$OUT"; then
    echo "ok:   RINGLET_TRANSPORT=shm under ulimit -f 2048: init failed on both ranks, naming the limit"
else
    echo "FAIL: RINGLET_TRANSPORT=shm under ulimit -f 2048: launcher exit status $rc"
    tail -n 20 "$OUT"
    fails=1
fi
RINGLET_DEBUG=INFO RINGLET_TIMEOUT=30 "$RUN" -n 2 --timeout 120 --grace 10 sh -c 'ulimit -f 2048 && exec "$0"' \
    "$BUILD/tests/mp/shm_probe" >"$OUT" 2>&1
rc=$?
if [ "$rc" = 0 ] && [ "$(grep -c 'shm_probe: rank .: OK' "$OUT")" = 2 ] &&
    [ "$(grep -c 'transport shm unavailable: .*RLIMIT_FSIZE' "$OUT")" = 2 ] && grep -q 'rank 1 over tcp' "$OUT"; then
    echo "ok:   the default transports under ulimit -f 2048: the all-reduce went over TCP"
else
    echo "FAIL: the default transports under ulimit -f 2048: launcher exit status $rc"
    tail -n 20 "$OUT"
    fails=1
fi
[ $fails = 0 ] && { echo "shm_full: passed"; exit 0; }
exit 1

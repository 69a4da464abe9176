#!/usr/bin/env bash
# Shared memory when /dev/shm fills up after init (tests/mp/shm_full.c): 3 ranks over
# RINGLET_TRANSPORT=shm in a private mount namespace whose /dev/shm is a 32 MiB tmpfs;
# rank 0 fills it to the last page after init. Every page ringlet touches from then on must
# have been reserved (a sparse page of a full tmpfs is SIGBUS at its first touch): the
# doorbell's board pages (all-reduces of 16 KiB), and the FIFO a receive polls before its
# sender has connected (that receive fails cleanly, saying /dev/shm is full).
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
n=$(grep -cE "shm_full: rank [0-9] of 3: [0-9]+ checks, 0 failed" "$OUT")
if [ "$rc" = 0 ] && [ "$n" = 3 ]; then
    echo "ok:   3 ranks, /dev/shm full after init: $(grep -m1 -oE '[0-9]+ checks' "$OUT") per rank"
    grep "receive with /dev/shm full" "$OUT" | sed 's/^/      /'
    echo "shm_full: passed"
    exit 0
fi
echo "FAIL: 3 ranks, /dev/shm full after init: launcher exit status $rc, $n of 3 ranks passed"
tail -n 30 "$OUT"
exit 1

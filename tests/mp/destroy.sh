#!/usr/bin/env bash
# Destroy with an unmatched receive posted returns promptly although the peer is alive (destroy.c).
set -u
BUILD=${BUILD:-build}
out=$(RINGLET_TIMEOUT=30 "$BUILD/bin/ringlet-run" -n 3 --timeout 60 "$BUILD/tests/mp/destroy" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] && [ "$(grep -c 'destroy returned 0' <<<"$out")" -eq 3 ]

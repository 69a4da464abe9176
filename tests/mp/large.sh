#!/usr/bin/env bash
# An all-reduce of 2^31 + 5 int8 elements at P = 2 (about 2 GiB per rank), every element
# checked. Skipped under ThreadSanitizer, whose shadow memory would need some 20 GiB.
set -u
BUILD=${BUILD:-build}
if [[ "${SANITIZE:-}" == *thread* ]]; then
    echo "SKIP: 2 GiB buffers per rank are too large for ThreadSanitizer's shadow memory"
    exit 77
fi
out=$("$BUILD/bin/ringlet-run" -n 2 --timeout 300 "$BUILD/tests/mp/large" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] && [ "$(grep -c ', 0 wrong' <<<"$out")" -eq 2 ]

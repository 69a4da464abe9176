#!/usr/bin/env bash
# An all-reduce of 2^31 + 5 int8 elements at P = 2 (about 2 GiB per rank), every element
# checked; on host memory, then (normal build) on device memory over RINGLET_TEST_DEVICE
# (default sim: 2 GiB of device memory and 2 GiB pinned per rank). Skipped under
# ThreadSanitizer, whose shadow memory would need some 20 GiB.
set -u
BUILD=${BUILD:-build}
if [[ "${SANITIZE:-}" == *thread* ]]; then
    echo "SKIP: 2 GiB buffers per rank are too large for ThreadSanitizer's shadow memory"
    exit 77
fi
out=$("$BUILD/bin/ringlet-run" -n 2 --timeout 300 "$BUILD/tests/mp/large" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] && [ "$(grep -c ', 0 wrong' <<<"$out")" -eq 2 ] || exit 1
[ -n "${SANITIZE:-}" ] && exit 0
dev=${RINGLET_TEST_DEVICE:-sim}
[ "$dev" = none ] && exit 0
out=$(RINGLET_DEVICE=$dev "$BUILD/bin/ringlet-run" -n 2 --timeout 600 "$BUILD/tests/mp/large" --memory device 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] && [ "$(grep -c 'on device memory, 0 wrong' <<<"$out")" -eq 2 ]

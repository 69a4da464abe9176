#!/usr/bin/env bash
# The GPU tests' hook in the host suite (tests/run.sh runs every tests/mp/*.sh).
# CI has no GPU: there this prints why it skips and exits 77. On a machine with one
# (nvidia-smi works) it runs the test part of tests/gpu/run.sh: the device kernels
# against the CPU kernels, compute-sanitizer when installed, and the multi-process
# device-buffer tests when present; no benchmark, and not the host suite again.
# Exit 0 = passed, 77 = skipped, else failed.
set -u
cd "$(dirname "$0")/../.."
if [ -n "${RINGLET_GPU_RUN_ACTIVE:-}" ]; then
    echo "SKIP: tests/gpu/run.sh, which started this suite, runs the GPU tests itself"
    exit 77
fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no GPU on this machine (GPU tests run on the device machine via tests/gpu/run.sh)"
    exit 77
fi
exec bash tests/gpu/run.sh --tests-only

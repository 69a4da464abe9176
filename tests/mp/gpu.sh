#!/usr/bin/env bash
# The GPU tests' hook in the host suite (tests/run.sh runs every tests/mp/*.sh).
# CI has no GPU: there this prints why it skips and exits 77. On a machine with one
# (nvidia-smi lists one) it runs the quick tier's tests of tests/gpu/run.sh (--tests-only:
# preflight, the device kernels against the CPU kernels, collectives on device memory at 2
# and 4 ranks, stream order and abort, PyTorch's nccl backend on ringlet's libnccl.so.2, MPS;
# no build, no benchmark, each step under its own timeout). Results in
# $BUILD/tests/gpu/results.txt. Exit 0 = passed, 77 = skipped, else failed.
set -u
cd "$(dirname "$0")/../.." || exit 1
if [ -n "${RINGLET_GPU_RUN_ACTIVE:-}" ]; then
    echo "SKIP: tests/gpu/run.sh, which started this suite, runs the GPU tests itself"
    exit 77
fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no GPU on this machine (GPU tests run on the device machine via tests/gpu/run.sh)"
    exit 77
fi
exec bash tests/gpu/run.sh --tests-only

#!/usr/bin/env bash
# Runs a command under NVIDIA MPS (the multi-process service: several processes share the
# GPU's compute at once instead of time-slicing), started here in a private directory under
# $TMPDIR (default /tmp; keep it short: the daemon's socket path must fit) and stopped
# afterwards, whatever the command's outcome, also when this script gets SIGTERM, SIGINT or
# SIGHUP (as a step's timeout in tests/gpu/run.sh sends; run.sh also stops a daemon left in
# that step's TMPDIR after a SIGKILL).
#   tests/gpu/mps.sh command [args...]
# Exit: the command's status (1 where it skipped, 77: CUDA unusable under MPS); 77 when
# nvidia-cuda-mps-control is missing or MPS does not start.
set -u
if ! command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    echo "SKIP: nvidia-cuda-mps-control not found"
    exit 77
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-mps.XXXXXX")
export CUDA_MPS_PIPE_DIRECTORY="$dir/pipe" CUDA_MPS_LOG_DIRECTORY="$dir/log"
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
if ! nvidia-cuda-mps-control -d; then
    echo "SKIP: MPS did not start"
    rm -rf "$dir"
    exit 77
fi
stop_mps() {
    echo quit | nvidia-cuda-mps-control
    sleep 1
    tail -n 5 "$CUDA_MPS_LOG_DIRECTORY"/control.log 2>/dev/null
    rm -rf "$dir"
}
trap 'echo "mps.sh: signalled: stopping MPS"; stop_mps; exit 143' TERM INT HUP
echo "mps.sh: MPS running (pipes in $CUDA_MPS_PIPE_DIRECTORY)"
"$@"
rc=$?
# MPS is running: a command that skips (no usable CUDA) could not use the GPU through it
if [ $rc = 77 ]; then
    echo "FAIL: the command skipped under MPS: CUDA was not usable through the MPS daemon"
    rc=1
fi
trap - TERM INT HUP
stop_mps
exit $rc

#!/usr/bin/env bash
# Runs a command under NVIDIA MPS (the multi-process service: several processes share the
# GPU's compute at once instead of time-slicing), started here in a private directory and
# stopped afterwards, whatever the command's outcome.
#   tests/gpu/mps.sh command [args...]
# Exit: the command's status; 77 when nvidia-cuda-mps-control is missing or MPS does not start.
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
echo "mps.sh: MPS running (pipes in $CUDA_MPS_PIPE_DIRECTORY)"
"$@"
rc=$?
echo quit | nvidia-cuda-mps-control
sleep 1
cat "$CUDA_MPS_LOG_DIRECTORY"/control.log 2>/dev/null | tail -n 5
rm -rf "$dir"
exit $rc

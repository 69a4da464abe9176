#!/usr/bin/env bash
# ringlet's PyTorch DDP (python/ringlet/torch.py) against the references:
#   1. tests/python/ddp_vs_torch.py at P = 2 and 4: linear layers + BatchNorm, a different
#      random init and data shard per rank, 20 SGD steps, >= 4 buckets, trained once with
#      torch's DistributedDataParallel over Gloo (FileStore) and once with ringlet's; final
#      parameters and buffers agree to 1e-5 (normwise relative, per tensor); also with
#      no_sync every other step and with gradient_as_bucket_view.
#   2. tests/python/ddp_single.py at P = 4: a model without BatchNorm, ringlet DDP against
#      one process on the concatenated batch, 1e-5 (with and without bucket views).
# Skips (77) when torch is not importable by $PYTHON (default /usr/bin/python3), and in a
# sanitizer build (SANITIZE set): the interpreter would need the sanitizer runtime
# preloaded. Takes about 25 s on a 2-core machine. Exit 0 = passed, 1 = a failure.
set -u

source "$(dirname "$0")/lib/python.bash"
py_setup ddp-torch
pass='^\[[0-9]+\] rank [0-9]+: %s: PASS'
# shellcheck disable=SC2059
py_run ddp_vs_torch 2 "$(printf "$pass" ddp_vs_torch)" tests/python/ddp_vs_torch.py --store "$TMP/store2"
# shellcheck disable=SC2059
py_run ddp_vs_torch 4 "$(printf "$pass" ddp_vs_torch)" tests/python/ddp_vs_torch.py --store "$TMP/store4"
# shellcheck disable=SC2059
py_run ddp_single 4 "$(printf "$pass" ddp_single)" tests/python/ddp_single.py
py_finish ddp_torch

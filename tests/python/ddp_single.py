"""Acceptance 2: ringlet DDP on W ranks == one process on the concatenated batch.

A model without BatchNorm (linear layers + ReLU/Tanh), a different random init on
every rank, --batch samples per rank. Rank r trains with ringlet's DDP on shard r; every
rank also trains, alone, a copy of rank 0's initial model (what DDP broadcast) on the W
shards concatenated. With a mean loss, averaged gradients equal the gradient on the
whole batch, so after --steps SGD steps (momentum, and weight decay) the two agree up to
float32 rounding: normwise relative difference max|a-b|/max|b| <= --tol per parameter
(with and without gradient_as_bucket_view). Then, as a sanity check of the wire
compression, fp16 and bf16 runs that must stay within 2e-2 and 1e-1.
Prints "ddp_single: rank R: ... rel=..." and PASS/FAIL.
"""
import argparse
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_common import skip_unless_torch  # noqa: E402

skip_unless_torch()
import torch  # noqa: E402

import ringlet  # noqa: E402
from ringlet.torch import DistributedDataParallel as RingletDDP  # noqa: E402
from ddp_common import rank_world, setup_threads, mlp_bn, shard, state, compare, log  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--bucket-kb", type=float, default=1)
    ap.add_argument("--tol", type=float, default=1e-5)
    a = ap.parse_args()
    rank, world = rank_world()
    setup_threads()
    ringlet.init_from_env()

    ok = True
    # (gradient_as_bucket_view, compression, tolerance): 16-bit compression rounds every
    # gradient to 8 (bfloat16) or 11 (float16) bits, so it only has to stay close
    for view, comp, tol in ((False, None, a.tol), (True, None, a.tol), (False, "fp16", 2e-2), (True, "bf16", 1e-1)):
        model = RingletDDP(mlp_bn(seed=2000 + rank, with_bn=False), bucket_cap_mb=a.bucket_kb / 1024,
                           first_bucket_cap_mb=a.bucket_kb / 4096, gradient_as_bucket_view=view, compression=comp)
        single = copy.deepcopy(model.module)  # rank 0's initial parameters, after the broadcast
        if view:
            for p in single.parameters():
                p.grad = None
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
        opt1 = torch.optim.SGD(single.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
        loss_fn = torch.nn.MSELoss()
        for step in range(a.steps):
            x, y = shard(rank, step, a.batch, salt=5)
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            xs, ys = zip(*(shard(r, step, a.batch, salt=5) for r in range(world)))
            opt1.zero_grad()
            loss_fn(single(torch.cat(xs)), torch.cat(ys)).backward()
            opt1.step()
        rel, rel_el, worst = compare(state(model), state(single))
        good = rel <= tol
        ok = ok and good
        log(rank, "ddp_single: world %d, %d steps, batch %d per rank, gradient_as_bucket_view=%s, compression=%s, "
            "%d buckets: DDP vs one process on the concatenated batch: rel=%.3g (elementwise %.3g, worst %s; "
            "tolerance %g) %s" % (world, a.steps, a.batch, view, comp, model.num_buckets, rel, rel_el, worst, tol,
                                  "ok" if good else "FAIL"))
        model.close()
    ringlet.destroy()
    log(rank, "ddp_single:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

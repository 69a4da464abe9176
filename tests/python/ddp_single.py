"""Acceptance 2: ringlet DDP on W ranks == one process on the concatenated batch.

A model without BatchNorm (linear layers + ReLU/Tanh), a different random init on
every rank, --batch samples per rank. Rank r trains with ringlet's DDP on shard r; every
rank also trains, alone, a copy of rank 0's initial model (what DDP broadcast) on the W
shards concatenated. With a mean loss, averaged gradients equal the gradient on the
whole batch, so after --steps SGD steps (momentum, and weight decay) the two agree up to
float32 rounding. Compared: the updates (final minus initial parameters), normwise per
tensor, max|a-b|/max|b| <= the tolerance: --tol without compression (with and without
gradient_as_bucket_view), 1e-2 (fp16) and 5e-2 (bf16) with the wire compression, which
rounds every averaged gradient to 11 or 8 bits. Each run also trains a third copy on this
rank's shard alone (no averaging), whose updates must miss by more than twice the
tolerance: the tolerance would catch gradients that were never averaged. The parameters
must be the same on every rank, bit for bit (an all-reduce max and min of them equal this
rank's).
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
    # (gradient_as_bucket_view, compression, tolerance on the updates)
    for view, comp, tol in ((False, None, a.tol), (True, None, a.tol), (False, "fp16", 1e-2), (True, "bf16", 5e-2)):
        model = RingletDDP(mlp_bn(seed=2000 + rank, with_bn=False), bucket_cap_mb=a.bucket_kb / 1024,
                           first_bucket_cap_mb=a.bucket_kb / 4096, gradient_as_bucket_view=view, compression=comp)
        single = copy.deepcopy(model.module)  # rank 0's initial parameters, after the broadcast
        alone = copy.deepcopy(model.module)  # trained on this rank's shard only: the control
        p0 = state(single)
        if view:
            for p in single.parameters():
                p.grad = None
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
        opt1 = torch.optim.SGD(single.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
        opt_alone = torch.optim.SGD(alone.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
        loss_fn = torch.nn.MSELoss()
        for step in range(a.steps):
            x, y = shard(rank, step, a.batch, salt=5)
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            opt_alone.zero_grad()
            loss_fn(alone(x), y).backward()
            opt_alone.step()
            xs, ys = zip(*(shard(r, step, a.batch, salt=5) for r in range(world)))
            opt1.zero_grad()
            loss_fn(single(torch.cat(xs)), torch.cat(ys)).backward()
            opt1.step()

        def update(m):
            return {k: v - p0[k] for k, v in state(m).items()}

        want = update(single)
        rel, rel_el, worst = compare(update(model), want)
        rel_alone = compare(update(alone), want)[0]
        flat = torch.cat([v.reshape(-1) for v in state(model).values()])
        hi, lo = flat.clone(), flat.clone()
        ringlet.all_reduce(hi, op="max")
        ringlet.all_reduce(lo, op="min")
        same = torch.equal(hi, flat) and torch.equal(lo, flat)
        good = rel <= tol and rel_alone > 2 * tol and same
        ok = ok and good
        log(rank, "ddp_single: world %d, %d steps, batch %d per rank, gradient_as_bucket_view=%s, compression=%s, "
            "%d buckets: updates, DDP vs one process on the concatenated batch: rel=%.3g (elementwise %.3g, worst %s; "
            "tolerance %g); this rank's shard alone: rel=%.3g (must exceed %g); parameters the same on every rank: "
            "%s; %s" % (world, a.steps, a.batch, view, comp, model.num_buckets, rel, rel_el, worst, tol, rel_alone,
                        2 * tol, same, "ok" if good else "FAIL"))
        model.close()
    ringlet.destroy()
    log(rank, "ddp_single:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""torch's own DistributedDataParallel and ZeroRedundancyOptimizer over the backend "ringlet"
against the same over Gloo.

    ringlet-run -n P python3 tests/python/backend_ddp.py [--steps N] [--device cpu|cuda --ref nccl]

Every configuration trains two copies of one model, from a different random init per rank
(DDP broadcasts rank 0's), on a different data shard per rank: one copy with torch's DDP
over ringlet's default group, one with torch's DDP over a Gloo group (--ref nccl: an NCCL
group, on the GPU machine), with the same options; afterwards every parameter and buffer
must agree to --tol (1e-6; max |ringlet - gloo| / max(1, max |gloo|), per tensor). The
configurations:
  bn               Linear + BatchNorm1d (buffers broadcast before each forward) + Linear,
                   several buckets (bucket_cap_mb small), SGD with momentum
  unused           a branch used only at odd steps, find_unused_parameters=True
  no_sync          no_sync() on every other step (gradients accumulate, then one reduction)
  bucket_view      gradient_as_bucket_view=True
  static_graph     static_graph=True, with a parameter never used
  comm_hook        a Python comm hook (torch's allreduce_hook: all_reduce(async_op=True)
                   .get_future().then(...))
  subgroups        (P >= 4, even) DDP over new_group([0, 1]) and new_group([2, 3]) ...
  zero             ZeroRedundancyOptimizer (Adam) over each group, with DDP, on an MLP
  ringlet_ddp      ringlet's own DDP class (ringlet.torch.DistributedDataParallel) made with no
                   communicator after init_process_group("ringlet"): it takes a communicator
                   split from the default group (rank 0's bootstrap would have met torch's
                   store on MASTER_PORT); a second one given process_group=dist.group.WORLD
                   shares it; against torch's DDP over the reference group
Prints per configuration the largest difference, then "backend_ddp: rank R: PASS" or FAIL lines.
"""
import argparse
import copy
import datetime
import faulthandler
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import ringlet.torch  # noqa: F401  (registers the backend)

faulthandler.enable()
faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)  # a step's budget: where it hung

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=8)
ap.add_argument("--tol", type=float, default=1e-6)
ap.add_argument("--device", default="cpu")
ap.add_argument("--ref", default="gloo", help="the reference backend (gloo; nccl on a GPU)")
ap.add_argument("--configs", default="bn,unused,no_sync,bucket_view,static_graph,comm_hook,subgroups,zero,ringlet_ddp")
a = ap.parse_args()

dist.init_process_group("ringlet", timeout=datetime.timedelta(seconds=float(os.environ.get("RINGLET_TIMEOUT") or 120)))
R, P = dist.get_rank(), dist.get_world_size()
if a.device == "cuda":
    DEV = torch.device("cuda", int(os.environ.get("LOCAL_RANK", R)) % torch.cuda.device_count())
    torch.cuda.set_device(DEV)
else:
    DEV = torch.device("cpu")
REF = dist.new_group(backend=a.ref)
torch.set_num_threads(1)
failed = []


def note(msg):
    print("backend_ddp: rank %d: %s" % (R, msg), flush=True)


class BN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.bn = torch.nn.BatchNorm1d(32)
        self.b = torch.nn.Linear(32, 24)
        self.c = torch.nn.Linear(24, 4)

    def forward(self, x, step=0):
        return self.c(torch.relu(self.b(torch.relu(self.bn(self.a(x))))))


class MLP(torch.nn.Module):
    """No BatchNorm: with Adam, a bias right before a BatchNorm (its gradient is zero up to
    rounding) turns summation-order noise into full-size steps."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 24)
        self.c = torch.nn.Linear(24, 4)

    def forward(self, x, step=0):
        return self.c(torch.tanh(self.b(torch.tanh(self.a(x)))))


class Branchy(torch.nn.Module):
    """A branch used at odd steps only; a parameter never used."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.odd = torch.nn.Linear(32, 32)
        self.never = torch.nn.Linear(32, 32)
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x, step=0):
        h = torch.relu(self.a(x))
        if step % 2:
            h = torch.relu(self.odd(h))
        return self.head(h)


class Static(Branchy):
    def forward(self, x, step=0):  # the same graph every step; `never` never used
        return self.head(torch.relu(self.odd(torch.relu(self.a(x)))))


def data(step, batch=12):
    g = torch.Generator().manual_seed(1000 * step + 17 * R + 5)
    return torch.randn(batch, 16, generator=g).to(DEV), torch.randint(0, 4, (batch,), generator=g).to(DEV)


def train(model, opt, steps, no_sync_every=0):
    loss_fn = torch.nn.CrossEntropyLoss()
    for s in range(steps):
        x, y = data(s)
        if no_sync_every and s % no_sync_every == 0 and s + 1 < steps:
            with model.no_sync():
                loss_fn(model(x, s), y).backward()
            continue
        loss_fn(model(x, s), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=False)


def compare(name, m1, m2):
    worst = 0.0
    bad = []
    s1 = dict(m1.state_dict())
    s2 = dict(m2.state_dict())
    for k in s1:
        t1, t2 = s1[k].detach().double().cpu(), s2[k].detach().double().cpu()
        d = (t1 - t2).abs().max().item() / max(1.0, t2.abs().max().item()) if t1.numel() else 0.0
        worst = max(worst, d)
        if not d <= a.tol:
            bad.append("%s (%.3g)" % (k, d))
    if R == 0:
        note("%s: largest difference ringlet vs %s %.3g over %d tensors (tolerance %g)"
             % (name, a.ref, worst, len(s1), a.tol))
    if bad:
        failed.append(name)
        note("FAIL %s: differ beyond %g: %s" % (name, a.tol, ", ".join(bad[:8])))


def make(cls):
    torch.manual_seed(100 + R)  # a different init per rank: DDP must broadcast rank 0's
    m = cls().to(DEV)
    return m, copy.deepcopy(m)


def run_pair(name, cls, ddp_kw, steps=None, opt=("sgd",), no_sync_every=0, groups=None, hook=False, ddp1=DDP):
    steps = steps or a.steps
    g_ring, g_ref = groups if groups else (None, REF)
    m1, m2 = make(cls)
    d1 = ddp1(m1, process_group=g_ring, **ddp_kw)
    d2 = DDP(m2, process_group=g_ref, **ddp_kw)
    if hook:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        d1.register_comm_hook(g_ring, default_hooks.allreduce_hook)
        d2.register_comm_hook(g_ref, default_hooks.allreduce_hook)
    if opt[0] == "zero":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        o1 = ZeroRedundancyOptimizer(d1.parameters(), torch.optim.Adam, process_group=g_ring, lr=1e-2)
        o2 = ZeroRedundancyOptimizer(d2.parameters(), torch.optim.Adam, process_group=g_ref, lr=1e-2)
    else:
        o1 = torch.optim.SGD(d1.parameters(), lr=0.05, momentum=0.9)
        o2 = torch.optim.SGD(d2.parameters(), lr=0.05, momentum=0.9)
    train(d1, o1, steps, no_sync_every)
    train(d2, o2, steps, no_sync_every)
    compare(name, m1, m2)
    # the ranks hold the same model (rank 0's) at the end
    w = torch.cat([p.detach().reshape(-1) for p in m1.parameters()]).double()
    w0 = w.clone()
    dist.broadcast(w0, src=0 if g_ring is None else dist.get_process_group_ranks(g_ring)[0]
                   if hasattr(dist, "get_process_group_ranks") else _first_rank(g_ring), group=g_ring)
    if not torch.equal(w, w0):
        failed.append(name + " (ranks differ)")
        note("FAIL %s: this rank's parameters differ from its group's first rank's" % name)


def _first_rank(g):
    return min(dist.distributed_c10d._pg_group_ranks[g].keys())


small = {"bucket_cap_mb": 0.002}  # several buckets for models this size
configs = a.configs.split(",")
try:
    if "bn" in configs:
        run_pair("bn", BN, dict(small))
    if "unused" in configs:
        run_pair("unused", Branchy, dict(small, find_unused_parameters=True))
    if "no_sync" in configs:
        run_pair("no_sync", BN, dict(small), no_sync_every=2)
    if "bucket_view" in configs:
        run_pair("bucket_view", BN, dict(small, gradient_as_bucket_view=True))
    if "static_graph" in configs:
        run_pair("static_graph", Static, dict(small, static_graph=True))
    if "comm_hook" in configs:
        run_pair("comm_hook", BN, dict(small), hook=True)
    if "subgroups" in configs and P >= 4 and P % 2 == 0:
        pairs = [[2 * i, 2 * i + 1] for i in range(P // 2)]
        mine_ring = mine_ref = None
        for pr in pairs:  # every rank creates every group, as torch requires
            gr = dist.new_group(pr)
            gg = dist.new_group(pr, backend=a.ref)
            if R in pr:
                mine_ring, mine_ref = gr, gg
        run_pair("subgroups", BN, dict(small), groups=(mine_ring, mine_ref))
    if "zero" in configs:
        run_pair("zero", MLP, dict(small), opt=("zero",))
    if "ringlet_ddp" in configs:
        from ringlet.torch import DistributedDataParallel as RingletDDP
        run_pair("ringlet_ddp", BN, dict(small), ddp1=RingletDDP)
        run_pair("ringlet_ddp on WORLD", BN, dict(small), groups=(dist.group.WORLD, REF), ddp1=RingletDDP)
except Exception as e:  # noqa: BLE001
    import traceback
    traceback.print_exc()
    failed.append("exception: %s" % e)

if failed:
    note("FAIL: %s" % ", ".join(failed))
else:
    note("PASS (%s; %d ranks, %d steps each)" % (", ".join(configs), P, a.steps))
dist.destroy_process_group()
sys.exit(1 if failed else 0)

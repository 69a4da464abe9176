"""Step time of data-parallel training: ringlet's DDP, and torch's DDP over the backend
"ringlet", against torch's DDP over Gloo.

    build/bin/ringlet-run -n 2 python3 perf/ddp_bench.py --store /tmp/fresh-file   (or perf/ddp_bench.sh)

Model: --layers x Linear(--width, --width) with ReLU, and a Linear(--width, 10) head
(defaults: 4 x 2048 x 2048 + head = 16.8 M parameters, 67 MB in float32), --batch samples
per rank (32), SGD. Modes, each rank running the same thing:
  none     the model without DDP (every rank trains alone, so the machine is as busy)
  torch    torch.nn.parallel.DistributedDataParallel, Gloo backend (FileStore)
  ringlet  ringlet.torch.DistributedDataParallel
  backend  torch.nn.parallel.DistributedDataParallel over the backend "ringlet"
           (dist.new_group(backend="ringlet") on the same store)
  null     torch's DDP over a group whose allreduce moves nothing: what torch's reducer
           costs by itself (not in the default modes)
Steps are interleaved one by one (after --warmup untimed steps per mode: --rounds x
--steps rounds of one step per mode, the order rotating), so that drifts of a shared
machine hit every mode alike. A step is zero_grad + forward + loss + backward + optimizer step; its time is
taken on every rank and the slowest rank's counts. Prints the median step time per mode,
the overheads over "none" (as a difference of medians, and as the median of each round's
step minus that round's "none" step, which the goals are judged on), and the ratios:
  ringlet / torch step time            (goal <= 1.0)
  ringlet overhead / torch overhead    (goal <= 0.5)
  backend / torch step time            (goal <= 1.0)
  backend overhead / torch overhead    (goal <= 0.5)
Then a trace of one ringlet step: when each bucket's all-reduce was launched and when
finish saw it complete, relative to the start of backward, against the end of backward
(the autograd engine's final callback), showing the first buckets' all-reduces start
while backward is still running.
--view: gradient_as_bucket_view in both DDPs. --threads: torch intra-op threads per rank.
"""
import argparse
import collections
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import ringlet
from ringlet.torch import DistributedDataParallel as RingletDDP


def make_model(width, layers, seed):
    torch.manual_seed(seed)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    mods.append(torch.nn.Linear(width, 10))
    return torch.nn.Sequential(*mods)


def null_allreduce():
    """An allreduce that moves nothing and is complete at once: torch's DDP over it costs
    what its reducer does (copies into buckets, the division, copies back), the floor
    under any backend's overhead."""
    alive = collections.deque(maxlen=64)  # C++ finds a Python Work's overrides only while it lives

    def allreduce(tensors, opts=None):
        fut = torch.futures.Future()
        fut.set_result(list(tensors))
        alive.append(_DoneWork(fut))
        return alive[-1]
    return allreduce


class _DoneWork(torch._C._distributed_c10d.Work):
    def __init__(self, fut):
        super().__init__()
        self._fut = fut

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def get_future(self):
        return self._fut


def trace_backend_step(model, pg, x, y, rank):
    """One step of torch's DDP over the backend, with when its reducer called allreduce on
    each bucket and when the bucket's future completed, against the end of backward."""
    calls = []
    cls_allreduce = type(pg).allreduce

    def allreduce(tensors, opts=None):
        rec = {"launch": time.monotonic(), "bytes": sum(t.numel() * t.element_size() for t in tensors)}
        calls.append(rec)
        w = cls_allreduce(pg, tensors, opts)
        w.get_future().then(lambda f: rec.setdefault("complete", time.monotonic()))
        return w
    pg.allreduce = allreduce
    steps = []
    try:
        ringlet.barrier()
        run_pass(model[0], model[1], x, y, 1, trace=steps)
    finally:
        del pg.allreduce
    t0, tb, te, t1 = steps[0]
    if rank == 0:
        print("ddp_bench: trace of one backend step on rank 0 (ms from the start of backward; backward, the "
              "reducer's wait included, took %.1f ms; the optimizer step %.1f ms):" % ((te - tb) * 1e3, (t1 - te) * 1e3))
        for i, c in enumerate(calls):
            print("ddp_bench:   allreduce %d (%5.1f MB) called at %7.1f ms, its future complete at %7.1f ms"
                  % (i, c["bytes"] / 1e6, (c["launch"] - tb) * 1e3, (c.get("complete", float("nan")) - tb) * 1e3))
        sys.stdout.flush()


def max_over_ranks(v):
    t = torch.tensor([v], dtype=torch.float64)
    ringlet.all_reduce(t, op="max")
    return t.item()


def run_pass(model, opt, x, y, steps, trace=None):
    loss_fn = torch.nn.CrossEntropyLoss()
    times = []
    cuda = x.is_cuda
    for _ in range(steps):
        t0 = time.monotonic()
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        tb = time.monotonic()
        loss.backward()
        te = time.monotonic()
        opt.step()
        if cuda:
            torch.cuda.synchronize()  # a step is done when the GPU is
        t1 = time.monotonic()
        times.append(t1 - t0)
        if trace is not None:
            trace.append((t0, tb, te, t1))
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True, help="a fresh FileStore path for torch.distributed")
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per mode = rounds x steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps per mode")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--bucket-mb", type=float, default=25)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--view", action="store_true", help="gradient_as_bucket_view in both DDPs")
    ap.add_argument("--modes", default="none,torch,ringlet,backend",
                    help="none (no DDP), torch (torch DDP over Gloo), ringlet (ringlet.torch DDP), backend (torch DDP "
                         "over the backend ringlet), nccl (torch DDP over backend nccl: run with ringlet's "
                         "libnccl.so.2 preloaded), null (torch DDP over a group whose allreduce moves nothing)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (several ranks share a GPU)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", store=dist.FileStore(a.store, world), rank=rank, world_size=world)
    ringlet.init_from_env()
    device = torch.device("cpu")
    if a.device == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)

    g = torch.Generator().manual_seed(rank)
    x = torch.randn(a.batch, a.width, generator=g).to(device)
    y = torch.randint(0, 10, (a.batch,), generator=g).to(device)
    modes = a.modes.split(",")
    nccl_pg = dist.new_group(backend="nccl") if "nccl" in modes else None
    ringlet_pg = dist.new_group(backend="ringlet") if "backend" in modes else None
    null_pg = dist.new_group(backend="ringlet") if "null" in modes else None
    if null_pg is not None:
        null_pg.allreduce = null_allreduce()  # torch's reducer finds the instance's override
    models = {}
    for m in modes:
        net = make_model(a.width, a.layers, seed=1).to(device)
        if m == "nccl":
            net = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=a.bucket_mb,
                                                            gradient_as_bucket_view=a.view, process_group=nccl_pg)
        elif m == "torch":
            net = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=a.bucket_mb,
                                                            gradient_as_bucket_view=a.view)
        elif m == "ringlet":
            net = RingletDDP(net, bucket_cap_mb=a.bucket_mb, gradient_as_bucket_view=a.view)
        elif m in ("backend", "null"):
            net = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=a.bucket_mb, gradient_as_bucket_view=a.view,
                                                            process_group=ringlet_pg if m == "backend" else null_pg)
        models[m] = (net, torch.optim.SGD(net.parameters(), lr=1e-4))
    nparams = sum(p.numel() for p in models[modes[0]][0].parameters())
    if rank == 0:
        print("ddp_bench: world %d on %s, %d x Linear(%d, %d) + head: %.1f M parameters (%.0f MB float32), batch %d "
              "per rank, %d torch thread(s) per rank, bucket cap %g MB%s, %d rounds x %d steps (+%d warm-up)"
              % (world, device, a.layers, a.width, a.width, nparams / 1e6, nparams * 4 / 1e6, a.batch, a.threads,
                 a.bucket_mb, ", gradient_as_bucket_view" if a.view else "", a.rounds, a.steps, a.warmup),
              flush=True)

    samples = {m: [] for m in modes}
    tails = []
    for m in modes:
        net, opt = models[m]
        run_pass(net, opt, x, y, a.warmup)
    for r in range(a.rounds * a.steps):
        order = modes[r % len(modes):] + modes[:r % len(modes)]  # rotate: no mode always first
        for m in order:
            net, opt = models[m]
            ringlet.barrier()
            tr = []
            ts = run_pass(net, opt, x, y, 1, trace=tr)
            samples[m].append(max_over_ranks(ts[0]))  # the slowest rank's step
            if m == "ringlet":
                t = net.bucket_trace()
                tails.append(max_over_ranks(t["finish_end"] - t["finish_start"]))
    med = {m: statistics.median(samples[m]) for m in modes}
    if rank == 0:
        for m in modes:
            s = sorted(samples[m])
            print("ddp_bench: %-8s median %7.1f ms  (min %7.1f, max %7.1f, %d steps)"
                  % (m, med[m] * 1e3, s[0] * 1e3, s[-1] * 1e3, len(s)))
        if "none" in med and "torch" in med:
            ot = med["torch"] - med["none"]
            print("ddp_bench: overhead over no DDP (difference of medians): %s"
                  % ", ".join("%s %.1f ms" % (m, (med[m] - med["none"]) * 1e3) for m in modes if m != "none"))
            # Each round runs every mode once, so a round's step minus its "none" step cancels the
            # drifts of a shared machine (step times spread by +-20% here): the median of these
            # paired differences is the overhead the goals are judged on.
            paired = {m: statistics.median(step - base for step, base in zip(samples[m], samples["none"]))
                      for m in modes if m != "none"}
            print("ddp_bench: overhead over no DDP (median of paired differences, judged): %s"
                  % ", ".join("%s %.1f ms" % (m, paired[m] * 1e3) for m in paired))
            pt = paired["torch"]
            for m, what in (("ringlet", "ringlet's DDP"), ("backend", "torch's DDP over the backend ringlet")):
                if m not in med:
                    continue
                print("ddp_bench: %s / torch step time = %.3f (goal <= 1.0%s) [%s]"
                      % (m, med[m] / med["torch"], "; on CUDA, torch over Gloo / ringlet >= 5" if m == "ringlet" else "",
                         what))
                print("ddp_bench: %s overhead / torch overhead = %.3f (goal <= 0.5; %.3f as a difference of medians)"
                      % (m, paired[m] / pt if pt > 0 else float("nan"),
                         (med[m] - med["none"]) / ot if ot > 0 else float("nan")))
            if "null" in paired and pt > 0:
                print("ddp_bench: torch's reducer alone (null) / torch overhead = %.3f: no backend's overhead is "
                      "below it; backend - null = %.1f ms of communication not hidden, torch - null = %.1f ms"
                      % (paired["null"] / pt, (paired.get("backend", float("nan")) - paired["null"]) * 1e3,
                         (pt - paired["null"]) * 1e3))
        if tails:
            print("ddp_bench: ringlet: median wait at the end of backward for the last buckets (finish): %.1f ms"
                  % (statistics.median(tails) * 1e3))

    if "ringlet" in models:
        net, opt = models["ringlet"]
        steps = []
        run_pass(net, opt, x, y, 1, trace=steps)
        t0, tb, te, t1 = steps[0]
        tr = net.bucket_trace()
        if rank == 0:
            print("ddp_bench: trace of one ringlet step on rank 0 (ms from the start of backward; backward took "
                  "%.1f ms, the autograd engine's final callback started at %.1f ms):"
                  % ((te - tb) * 1e3, (tr["finish_start"] - tb) * 1e3))
            first_hook, _ = net.backward_hook_times
            print("ddp_bench:   first gradient ready (hook) at %.1f ms" % ((first_hook - tb) * 1e3))
            for b in tr["buckets"]:
                where = "before" if b["launch"] < tr["finish_start"] else "after"
                print("ddp_bench:   bucket %d (%5.1f MB, %d params): all-reduce launched at %7.1f ms (%s backward "
                      "ended), seen complete at %7.1f ms, gradients written back by %7.1f ms"
                      % (b["bucket"], b["bytes"] / 1e6, b["nparams"], (b["launch"] - tb) * 1e3, where,
                         (b["complete"] - tb) * 1e3, (b["done"] - tb) * 1e3))
            print("ddp_bench:   backward ended at %.1f ms; finish returned at %.1f ms; %d of %d buckets launched "
                  "before backward ended"
                  % ((tr["finish_start"] - tb) * 1e3, (tr["finish_end"] - tb) * 1e3, tr["buckets_before_finish"],
                     len(tr["buckets"])), flush=True)
        net.close()
    if "backend" in models:
        trace_backend_step(models["backend"], ringlet_pg, x, y, rank)
    dist.destroy_process_group()
    ringlet.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())

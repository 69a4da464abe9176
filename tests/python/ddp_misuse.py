"""Acceptance 3 (from PyTorch) plus find_unused_parameters: misuse gives a clear error
on every rank, and the DDP object goes on working afterwards where that makes sense.

  shapes    the last rank builds Linear(8, 5) where the others build Linear(8, 4):
            RingletError on every rank, the same message naming the parameter and both shapes
  unused    a module with a branch its forward never uses, without find_unused_parameters:
            loss.backward() raises on every rank, naming the parameter; the next iteration
            (after a fix: find_unused_parameters) trains
  twice     backward twice after one forward (retain_graph): "reported ready twice"
  find      find_unused_parameters: a branch unused everywhere keeps .grad None; a branch
            used on the last rank only gets the average (the others contributed zeros) on
            every rank; the other gradients equal torch's own average
  find-moving  find_unused_parameters, the branch used by one rank, another each iteration,
            the gradients set to None before each (zero_grad(set_to_none=True), PyTorch 2's
            default): right averages, and a gradient of an earlier iteration (kept alive
            here; freed memory in a program that drops it) is never written again
  find-dataclass  find_unused_parameters with a dataclass output: its tensors are found
            (nothing taken for unused), and the gradients are the average
  frozen    a frozen layer (requires_grad False) made from each rank's own seed: rank 0's
            on every rank after construction (as torch's DDP broadcasts every parameter), not
            broadcast before forwards (a rank's later change to it stays), no gradient
  no-grad   a DDP built under torch.no_grad(): its hooks are registered, the gradients are
            the average
  buffer-size  a buffer replaced by one of another size (every rank): the next forward
            raises RingletError naming the buffer (the C layer would copy the old size)
  rebuild-free  the buckets rebuilt after the first backward: the old ones freed once no
            tensor uses them (at once; with a kept gradient view, after it is let go, its
            values intact meanwhile); the gradients stay the average
  converted the model converted to float64 after construction: the next forward raises,
            naming the parameter and both dtypes
  undefined a parameter whose gradient autograd leaves undefined on rank 0 only (after
            zero_grad(set_to_none=True)): its .grad is the average, rank 0 contributing
            zeros, on every rank (with and without bucket views)
  rewrap    the module wrapped again without close(): the new wrapper trains, the
            gradients are the average
  checkpoint  torch.utils.checkpoint (reentrant) on later layers: the gradients are the
            average (the end of the backward run inside the checkpoint's is not the end)
  checkpoint-unused  the whole model in a reentrant checkpoint, a parameter unused: the
            next forward raises, naming it (no hook came after the inner backward's end)
  sparse-find  find_unused_parameters, a sparse gradient on rank 0 in one iteration (its
            hook raises): every rank's backward raises, saying why; the next one trains
  outlive   gradient_as_bucket_view, the communicator destroyed without closing the DDP:
            the gradients keep their values (they were views into the freed buckets), and
            so do references to them the program kept
Prints "ddp_misuse: rank R: <case>: ..." and PASS/FAIL.
"""
import dataclasses
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_common import skip_unless_torch  # noqa: E402

skip_unless_torch()
import torch  # noqa: E402
import torch.utils.checkpoint  # noqa: E402

import ringlet  # noqa: E402
from ringlet.torch import DistributedDataParallel as RingletDDP  # noqa: E402
from ddp_common import rank_world, setup_threads, log  # noqa: E402

failures = []


def check(rank, case, cond, msg):
    log(rank, "ddp_misuse: %s: %s %s" % (case, msg, "ok" if cond else "FAIL"))
    if not cond:
        failures.append(case)


def same_everywhere(text):
    h = torch.tensor([int.from_bytes(hashlib.sha256(text.encode()).digest()[:7], "little")], dtype=torch.int64)
    lo, hi = h.clone(), h.clone()
    ringlet.all_reduce(lo, op="min")
    ringlet.all_reduce(hi, op="max")
    return lo.item() == hi.item() == h.item()


class Branchy(torch.nn.Module):
    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.body = torch.nn.Linear(8, 8)
        self.never = torch.nn.Linear(8, 8)   # unused on every rank
        self.sometimes = torch.nn.Linear(8, 8)  # used when use_sometimes
        self.head = torch.nn.Linear(8, 2)
        self.use_sometimes = False

    def forward(self, x):
        h = torch.relu(self.body(x))
        if self.use_sometimes:
            h = h + self.sometimes(h)
        return self.head(h)


class Reordered(torch.nn.Module):
    """Layers registered c, a, b and used a, b, c: the gradients become ready in another
    order than the reverse of registration, so the buckets are rebuilt."""

    def __init__(self):
        super().__init__()
        self.c = torch.nn.Linear(8, 2)
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


@dataclasses.dataclass
class Out:
    out: torch.Tensor


class DataclassOut(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return Out(self.inner(x))


class _NoGradW(torch.autograd.Function):
    """x * w whose backward gives w no gradient (None)."""

    @staticmethod
    def forward(ctx, x, w):
        return x * w

    @staticmethod
    def backward(ctx, g):
        return g, None


class NoGradForW(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, skip_w):
        h = self.lin(x)
        return _NoGradW.apply(h, self.w) if skip_w else h * self.w


def averaged(rank, world, case, base, seed, xin):
    """Whether base's gradients (but the branch unused everywhere) are the average of each
    rank's own, computed by hand on a copy of the module (made with seed) run on xin."""
    ref = Branchy(seed=seed)
    ref.load_state_dict(base.state_dict())
    ref.use_sometimes = base.use_sometimes
    ref(xin).sum().backward()
    good = True
    for (n, p), (_, q) in zip(base.named_parameters(), ref.named_parameters()):
        if n.startswith("never"):
            continue
        mine = q.grad.clone() if q.grad is not None else torch.zeros_like(q)
        ringlet.all_reduce(mine)
        mine /= world
        if p.grad is None or not torch.allclose(p.grad, mine, rtol=1e-5, atol=1e-6):
            good = False
            log(rank, "ddp_misuse: %s: %s: grad %s, expected %s" % (case, n, p.grad, mine))
    return good


def main():
    rank, world = rank_world()
    setup_threads()
    ringlet.init_from_env()
    last = world - 1

    # shapes
    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4 if rank != last else 5), torch.nn.ReLU(),
                                torch.nn.Linear(4 if rank != last else 5, 2))
    try:
        RingletDDP(model)
        check(rank, "shapes", False, "construction succeeded")
    except ringlet.RingletError as e:
        msg = str(e)
        check(rank, "shapes", "parameter 0 ('0.weight')" in msg and "[4, 8] on rank 0" in msg
              and ("[5, 8] on rank %d" % last) in msg and e.code == ringlet.ERR_INVALID_USAGE, msg)
        check(rank, "shapes", same_everywhere(msg), "the same message on every rank")

    # unused without find_unused_parameters
    ddp = RingletDDP(Branchy(seed=rank), bucket_cap_mb=300 / 2 ** 20)
    x = torch.randn(4, 8)
    try:
        ddp(x).sum().backward()
        check(rank, "unused", False, "backward succeeded")
    except ringlet.RingletError as e:
        msg = str(e)
        check(rank, "unused", "'never.weight'" in msg and "got no gradient" in msg and "find_unused_parameters" in msg,
              msg)
    # the object goes on: a clean iteration with every parameter used is impossible for this
    # module, so only check that the next forward is accepted and the error repeats
    try:
        ddp(x).sum().backward()
        check(rank, "unused-again", False, "backward succeeded")
    except ringlet.RingletError as e:
        check(rank, "unused-again", "'never.weight'" in str(e), "the error repeats in the next iteration")
    ddp.close()

    # twice
    ddp = RingletDDP(torch.nn.Linear(8, 2), bucket_cap_mb=1)
    out = ddp(x).sum()
    out.backward(retain_graph=True)
    try:
        out.backward()
        check(rank, "twice", False, "second backward succeeded")
    except ringlet.RingletError as e:
        msg = str(e)
        check(rank, "twice", "reported ready twice" in msg and ("'weight'" in msg or "'bias'" in msg), msg)
    ddp(x).sum().backward()  # a forward starts a clean iteration
    check(rank, "twice", True, "the next iteration trains")
    ddp.close()

    # find_unused_parameters
    for view in (False, True):
        case = "find%s" % ("+view" if view else "")
        base = Branchy(seed=7)
        ddp = RingletDDP(base, bucket_cap_mb=300 / 2 ** 20, find_unused_parameters=True,
                         gradient_as_bucket_view=view)
        for it in range(2):
            for p in ddp.parameters():
                p.grad = None
            base.use_sometimes = rank == last
            g = torch.Generator().manual_seed(100 * it + rank)
            xin = torch.randn(4, 8, generator=g)
            ddp(xin).sum().backward()
            check(rank, case, base.never.weight.grad is None,
                  "iteration %d: a parameter unused everywhere keeps no gradient" % it)
            check(rank, case, averaged(rank, world, case, base, 7, xin),
                  "iteration %d: gradients are the average (a branch used on rank %d only included)" % (it, last))
        ddp.close()

    case = "find-moving"
    base = Branchy(seed=11)
    ddp = RingletDDP(base, bucket_cap_mb=300 / 2 ** 20, find_unused_parameters=True)
    kept = []
    for it in range(3):
        kept += [(p.grad, p.grad.clone()) for p in base.parameters() if p.grad is not None]
        for p in ddp.parameters():
            p.grad = None
        base.use_sometimes = rank == it % world
        g = torch.Generator().manual_seed(100 * it + rank)
        xin = torch.randn(4, 8, generator=g)
        ddp(xin).sum().backward()
        stale = sum(1 for grad, was in kept if not torch.equal(grad, was))
        check(rank, case, stale == 0, "iteration %d: %d gradient(s) of earlier iterations were written" % (it, stale))
        check(rank, case, averaged(rank, world, case, base, 11, xin),
              "iteration %d: gradients are the average (a branch used on rank %d only)" % (it, it % world))
    ddp.close()

    # find-dataclass: the output a dataclass (as transformers' models return): its tensors
    # are found, so the parameters they depend on are not taken for unused
    case = "find-dataclass"
    base = Branchy(seed=13)
    ddp = RingletDDP(DataclassOut(base), bucket_cap_mb=300 / 2 ** 20, find_unused_parameters=True)
    base.use_sometimes = rank == last
    g = torch.Generator().manual_seed(300 + rank)
    xin = torch.randn(4, 8, generator=g)
    try:
        ddp(xin).out.sum().backward()
        check(rank, case, averaged(rank, world, case, base, 13, xin), "gradients are the average")
    except Exception as e:  # noqa: BLE001
        check(rank, case, False, "backward raised %s: %s" % (type(e).__name__, e))
    ddp.close()

    # frozen: rank 0's at construction only; not part of the gradients
    case = "frozen"
    torch.manual_seed(100 + rank)
    model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Linear(6, 3))
    model[0].requires_grad_(False)
    w0 = model[0].weight.detach().clone()
    ringlet.broadcast(w0, src=0)
    ddp = RingletDDP(model, bucket_cap_mb=64 / 2 ** 20)
    check(rank, case, torch.equal(model[0].weight, w0) and torch.equal(model[1].weight.detach().clone(), model[1].weight),
          "the frozen weight is rank 0's after construction")
    with torch.no_grad():
        model[0].bias.add_(float(rank))  # each rank's own change: kept (not broadcast again)
    want_bias = model[0].bias.detach().clone()
    g = torch.Generator().manual_seed(400 + rank)
    ddp(torch.randn(4, 8, generator=g)).sum().backward()
    check(rank, case, torch.equal(model[0].bias, want_bias) and model[0].weight.grad is None
          and model[1].weight.grad is not None, "the frozen layer is left alone by forward and backward")
    ddp.close()

    # no-grad: built under torch.no_grad()
    case = "no-grad"
    base = Branchy(seed=17)
    base.use_sometimes = True
    with torch.no_grad():
        try:
            ddp = RingletDDP(base, bucket_cap_mb=300 / 2 ** 20, find_unused_parameters=True)
        except Exception as e:  # noqa: BLE001
            ddp = None
            check(rank, case, False, "construction raised %s: %s" % (type(e).__name__, e))
    if ddp is not None:
        g = torch.Generator().manual_seed(500 + rank)
        xin = torch.randn(4, 8, generator=g)
        ddp(xin).sum().backward()
        check(rank, case, averaged(rank, world, case, base, 17, xin), "gradients are the average")
        ddp.close()

    # buffer-size: a buffer replaced by one of another size
    case = "buffer-size"
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.BatchNorm1d(4))
    ddp = RingletDDP(model, bucket_cap_mb=64 / 2 ** 20)
    model[1].running_mean = torch.zeros(2)
    try:
        ddp(torch.randn(4, 8))
        check(rank, case, False, "the forward succeeded")
    except ringlet.RingletError as e:
        msg = str(e)
        check(rank, case, "1.running_mean" in msg and "2 elements" in msg and "4 elements" in msg
              and e.code == ringlet.ERR_INVALID_USAGE, msg)
    ddp.close()

    # rebuild-free: the buckets rebuilt after the first backward (the layers are registered
    # in another order than the forward uses them); the old buckets are freed once no
    # tensor uses them: at once, or, where the caller kept a gradient that was a bucket
    # view, at the first forward after it let go (its values stay meanwhile)
    for view, keep in ((False, False), (True, False), (True, True)):
        case = "rebuild-free%s%s" % ("+view" if view else "", "+kept" if keep else "")
        torch.manual_seed(21)
        model = Reordered()
        ref = Reordered()
        ref.load_state_dict(model.state_dict())
        ddp = RingletDDP(model, bucket_cap_mb=300 / 2 ** 20, first_bucket_cap_mb=300 / 2 ** 20,
                         gradient_as_bucket_view=view)
        kept = model.c.weight.grad if keep else None  # a view of the first layout's bucket
        kept_copy = None
        g = torch.Generator().manual_seed(600 + rank)
        for it in range(3):
            xin = torch.randn(4, 8, generator=g)
            model.zero_grad(set_to_none=False)
            ref.zero_grad(set_to_none=False)
            ddp(xin).sum().backward()
            ref(xin).sum().backward()
            good = True
            for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
                want = q.grad.clone()
                ringlet.all_reduce(want)
                want /= world
                good = good and torch.allclose(p.grad, want, rtol=1e-5, atol=1e-6)
            check(rank, case, good, "iteration %d: gradients are the average" % it)
            if it == 0:
                kept_copy = kept.clone() if keep else None  # iteration 0's gradient, left there
                check(rank, case, ddp._rebuilds == 1, "rebuilt after the first backward (%d)" % ddp._rebuilds)
                check(rank, case, (ddp.retired_bytes_freed > 0) == (not keep),
                      "after the rebuild: %d bytes of the old buckets freed" % ddp.retired_bytes_freed)
            if keep and it == 1:
                check(rank, case, ddp.retired_bytes_freed == 0 and torch.equal(kept, kept_copy),
                      "a kept gradient view keeps the old buckets and its values")
                del kept
        check(rank, case, ddp.retired_bytes_freed > 0, "the old buckets freed by the end (%d bytes)"
              % ddp.retired_bytes_freed)
        ddp.close()

    # converted: the model converted to float64 after construction (every rank)
    case = "converted"
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 2))
    ddp = RingletDDP(model, bucket_cap_mb=64 / 2 ** 20)
    model.double()
    try:
        ddp(torch.randn(4, 8, dtype=torch.float64))
        check(rank, case, False, "the forward succeeded")
    except ringlet.RingletError as e:
        msg = str(e)
        check(rank, case, "parameter 0.weight" in msg and "torch.float64" in msg and "torch.float32" in msg
              and e.code == ringlet.ERR_INVALID_USAGE, msg)
    ddp.close()

    # undefined: autograd gives a parameter an undefined gradient on rank 0 only (a Function
    # returning None for it) after zero_grad(set_to_none=True): it contributes zeros there,
    # and every rank's .grad is the average, as in torch's DDP (not the gradient of the
    # iteration before, whose memory was let go), with and without bucket views
    for view in (False, True):
        case = "undefined" + ("-view" if view else "")
        torch.manual_seed(3)
        net = NoGradForW()
        ddp = RingletDDP(net, gradient_as_bucket_view=view)
        xin = torch.randn(2, 4, generator=torch.Generator().manual_seed(5))  # the same on every rank
        ddp(xin, False).sum().backward()
        local = net.w.grad.clone()  # every rank's own equals the average: the same input
        net.zero_grad(set_to_none=True)
        try:
            ddp(xin, rank == 0).sum().backward()
            want = local * (world - 1) / world
            got = net.w.grad
            check(rank, case, got is not None and torch.allclose(got, want, rtol=1e-6, atol=1e-7),
                  "w.grad %s, want %s (rank 0 contributed zeros)" % (None if got is None else got.tolist(),
                                                                    want.tolist()))
        except Exception as e:
            check(rank, case, False, "backward raised %s: %s" % (type(e).__name__, e))
        ddp.close()

    # rewrap: the same module wrapped again without close() (the old wrapper dropped, as
    # model = DDP(model.module) after unfreezing layers): the new one trains, the old
    # one's hooks gone with it
    case = "rewrap"
    torch.manual_seed(19)
    base = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    xin = torch.randn(4, 8, generator=torch.Generator().manual_seed(rank))
    ddp = RingletDDP(base)
    ddp(xin).sum().backward()
    base.zero_grad(set_to_none=True)
    ddp = RingletDDP(base)
    try:
        ddp(xin).sum().backward()
        ref = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        ref.load_state_dict(base.state_dict())
        ref(xin).sum().backward()
        good = True
        for p, q in zip(base.parameters(), ref.parameters()):
            want = q.grad.clone()
            ringlet.all_reduce(want)
            want /= world
            good &= p.grad is not None and torch.allclose(p.grad, want, rtol=1e-5, atol=1e-6)
        check(rank, case, good, "the second wrapper's gradients are the average")
    except Exception as e:
        check(rank, case, False, "backward raised %s: %s" % (type(e).__name__, e))
    ddp.close()

    # checkpoint: torch.utils.checkpoint (reentrant, torch 1.13's default) on the middle and
    # the last layers: their gradients come from a backward run inside the outer one, whose
    # end must not end the DDP's backward (the first layer's gradient comes after it)
    case = "checkpoint"
    torch.manual_seed(23)
    layers = torch.nn.ModuleList([torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)])

    class Checkpointed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = layers

        def forward(self, x):
            h = torch.relu(self.layers[0](x))
            h = torch.utils.checkpoint.checkpoint(lambda t: torch.relu(self.layers[1](t)), h, use_reentrant=True)
            return torch.utils.checkpoint.checkpoint(self.layers[2], h, use_reentrant=True)

    net = Checkpointed()
    xin = torch.randn(4, 8, generator=torch.Generator().manual_seed(rank))
    ddp = RingletDDP(net, bucket_cap_mb=300 / 2 ** 20)  # a bucket per layer or so
    try:
        for it in range(2):
            net.zero_grad(set_to_none=True)
            ddp(xin).sum().backward()
            ref = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8), torch.nn.ReLU(),
                                      torch.nn.Linear(8, 2))
            for k, j in ((0, 0), (2, 1), (4, 2)):
                ref[k].load_state_dict(layers[j].state_dict())
            ref(xin).sum().backward()
            good = True
            for j, k in ((0, 0), (1, 2), (2, 4)):
                for p, q in zip(layers[j].parameters(), ref[k].parameters()):
                    want = q.grad.clone()
                    ringlet.all_reduce(want)
                    want /= world
                    good &= p.grad is not None and torch.allclose(p.grad, want, rtol=1e-5, atol=1e-6)
            check(rank, case, good, "iteration %d: every layer's gradient is the average" % it)
    except Exception as e:
        check(rank, case, False, "backward raised %s: %s" % (type(e).__name__, e))
    ddp.close()

    # checkpoint-unused: the whole model in one reentrant checkpoint, so that every hook
    # comes from the inner backward, and a parameter it never uses (no
    # find_unused_parameters): the inner end leaves the iteration open, no hook comes after
    # it, and the next forward raises the error naming the parameter
    case = "checkpoint-unused"
    torch.manual_seed(29)

    class AllCheckpointed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Linear(8, 8)
            self.never = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.utils.checkpoint.checkpoint(self.body, x, use_reentrant=True)

    ddp = RingletDDP(AllCheckpointed())
    xin = torch.randn(4, 8, requires_grad=True)
    try:
        ddp(xin).sum().backward()
        ddp(xin)
        check(rank, case, False, "the next forward succeeded")
    except ringlet.RingletError as e:
        check(rank, case, "'never.weight'" in str(e) and "got no gradient" in str(e), str(e))
    ddp.close()

    # sparse-find: find_unused_parameters, rank 0's embedding gives a sparse gradient in
    # iteration 1 (its hook raises): every rank's backward raises (rank 0 naming the sparse
    # gradient, the others a usage error of another rank), no rank writes the gradient it
    # last had (freed by zero_grad(set_to_none=True)), and iteration 2 trains again
    case = "sparse-find"

    class Embedded(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(10, 4, generator=torch.Generator().manual_seed(5)))
            self.l = torch.nn.Linear(4, 1)

        def forward(self, idx, sparse):
            return self.l(torch.nn.functional.embedding(idx, self.w, sparse=sparse)).sum()

    emb = Embedded()
    ddp = RingletDDP(emb, find_unused_parameters=True)
    ref = Embedded()
    ref.load_state_dict(emb.state_dict())  # rank 0's (broadcast at construction): every rank's input alike
    idx = torch.tensor([1, 2, 7])
    for it in range(3):
        emb.zero_grad(set_to_none=True)
        try:
            ddp(idx, sparse=(rank == 0 and it == 1)).backward()
            raised = None
        except ringlet.RingletError as e:
            raised = str(e)
        if it == 1:
            want = "sparse gradient" if rank == 0 else "other rank(s) reported a DDP usage error"
            check(rank, case, raised is not None and want in raised, "iteration 1: %s" % raised)
        else:
            ref.zero_grad(set_to_none=True)
            ref(idx, False).backward()  # the same input on every rank: the average is this
            check(rank, case, raised is None and torch.allclose(emb.w.grad, ref.w.grad, rtol=1e-5, atol=1e-6),
                  "iteration %d: %s" % (it, raised or "gradient differs from the expected average"))
    ddp.close()

    # outlive: gradients that are bucket views outlive the communicator's destroy (which
    # closes the DDP objects made on it, here without ddp.close()): they keep their values
    # in memory of their own, not in the freed buckets (whose first bytes the allocator
    # reuses at once)
    case = "outlive"
    base = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 3))
    ddp = RingletDDP(base, bucket_cap_mb=64 / 2 ** 20, gradient_as_bucket_view=True)
    g = torch.Generator().manual_seed(rank)
    ddp(torch.randn(4, 8, generator=g)).sum().backward()
    want = [p.grad.clone() for p in base.parameters()]
    kept = [p.grad for p in base.parameters()]  # references the program kept (a gradient history)
    ranges = list(ddp._h.ranges)  # the bucket memory
    ringlet.destroy()
    inside = sum(1 for g in [p.grad for p in base.parameters()] + kept
                 if any(s <= g.data_ptr() < e for s, e in ranges))
    check(rank, case, inside == 0 and len(ranges) > 0,
          "%d gradient(s) or kept references still point into the freed buckets (%d)" % (inside, len(ranges)))
    junk = [torch.full((n,), 7.0) for n in (4, 12, 32, 64, 3, 16) for _ in range(8)]  # reuses freed memory
    same = all(torch.equal(p.grad, w) and torch.equal(k, w) for p, k, w in zip(base.parameters(), kept, want))
    check(rank, case, same and len(junk) > 0, "gradients (bucket views) unchanged after the communicator's destroy")
    log(rank, "ddp_misuse:", "PASS" if not failures else "FAIL (%s)" % ", ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())

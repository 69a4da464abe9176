"""Every operation of the torch.distributed backend "ringlet" against Gloo on the same inputs.

    ringlet-run -n P python3 tests/python/backend_ops.py [--quick] [--device cpu|cuda] [--seed S]

The default group is ringlet's (init_process_group("ringlet"), env://: the launcher's
MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE); the reference is a Gloo group over the same
ranks (new_group(backend="gloo")), given the same random inputs (seeded by case and rank).
Where Gloo has the operation (torch 1.13's Gloo: allreduce SUM/PRODUCT/MIN/MAX on its
dtypes, allreduce_coalesced, broadcast, reduce, allgather, allgather_coalesced, gather,
scatter, alltoall_base, send/recv), its result is the reference; where it has not
(AVG, bitwise ops, bool/bfloat16 reductions, _allgather_base, reduce_scatter,
_reduce_scatter_base, alltoall), every rank's inputs are all-gathered through Gloo and the
expected result computed locally (float64 for floats; integers wrap as ringlet documents).
Integers and data movement must match exactly; floats within a tolerance of a few units
in the last place per rank (stated in tol()).

torch 2.x's coalescing fast path (_coalescing_manager: all_gather_into_tensor, reduce_scatter_tensor
and all_reduce gathered into one call, whose Work is _end_coalescing's) runs through torch's
manager where it has one, else through the group's methods as torch 2.x calls them; on CPU,
rank 0 must see that Work incomplete before the other ranks launch; a failed call closes the
block, and so does the group's next block one left open; another group's block nests.
async_op=False must take ringlet's blocking form, async_op=True the non-blocking one.
Each case runs in one of four modes, rotating: sync (async_op=False), wait (async_op=True,
then work.wait()), future (work.get_future().wait()) and poll (is_completed() until true,
bounded). Also: non-contiguous tensors (handled by staging; a channels_last parameter too,
outside no_grad), empty tensors, wait(timeout)
on a receive whose send comes later (RuntimeError, and the receive still completes), a
receive pending across an all_reduce of the same byte length, a barrier after an
all_gather whose future was taken (it waits for it), a then() callback that
waits for another operation's future (torch's PowerSGD hook), an all_reduce's future
beside a receive's still pending, a subgroup (new_group,
against a Gloo subgroup) destroyed afterwards (its communicator gone at once), the
tensors the program dropped freed at once (not kept by the Works the group keeps for
torch's C++ code), and the clear errors: BAND on int32, PREMUL_SUM, an int16 reduction,
recv without src, a tag, AVG on bool, PRODUCT on complex, a sparse tensor.
Prints "backend_ops: rank R: N checks, F failed" and exits 0 iff none failed.
On CUDA (torch 2.x, --device cuda) the same cases run on CUDA tensors; the reference
stays Gloo on CPU copies.
"""
import argparse
import faulthandler
import signal
faulthandler.enable()
faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)  # a step's budget: where it hung
import datetime
import inspect
import os
import sys
import threading
import time
import zlib

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as _C10D

import ringlet.torch  # noqa: F401  (registers the backend)
from ringlet._backend_work import _window  # the thread's coalescing window (checked after a failed call)

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true", help="fewer sizes and dtypes")
ap.add_argument("--device", default="cpu")
ap.add_argument("--seed", type=int, default=int(os.environ.get("RINGLET_TEST_SEED", "1")))
a = ap.parse_args()

DEV = torch.device(a.device if a.device == "cpu" else "cuda:%d" % (int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
                                                                   % max(1, torch.cuda.device_count())))
# torch 2.x on CUDA: bound to the device, as torch 2.x's docs advise (it asks the group for its
# backend of the device, which a Python backend's group has none of unless it answers itself)
bound = {"device_id": DEV} if DEV.type == "cuda" and "device_id" in inspect.signature(
    dist.init_process_group).parameters else {}
# the suite's deadline where it sets one (the GPU suite's steps have budgets of their own)
DEADLINE = datetime.timedelta(seconds=float(os.environ.get("RINGLET_TIMEOUT") or 60))
dist.init_process_group("ringlet", timeout=DEADLINE, **bound)
R, P = dist.get_rank(), dist.get_world_size()
if DEV.type == "cuda":
    torch.cuda.set_device(DEV)
GLOO = dist.new_group(backend="gloo", timeout=DEADLINE)  # the references
FLAGS = dist.new_group(backend="gloo", timeout=4 * DEADLINE)  # only whether to go on after a case (below)
assert dist.get_backend() == "ringlet", dist.get_backend()

checks = 0
failed = 0
MODES = ("sync", "wait", "future", "poll")
mode_i = 0


def note(msg):
    print("backend_ops: rank %d: %s" % (R, msg), flush=True)


def fail(msg):
    global failed
    failed += 1
    note("FAIL " + msg)


def next_mode():
    global mode_i
    mode_i += 1
    return MODES[mode_i % len(MODES)]


def finish(work, mode, what):
    """Completes an async work the way mode says (sync: nothing to do)."""
    if mode == "sync":
        assert work is None, "%s: a synchronous call returned %r" % (what, work)
        return
    if isinstance(work, torch._C.Future):  # all_reduce_coalesced(async_op=True) in torch 1.13
        work.wait()
        return
    if mode == "wait":
        assert work.wait() is True
    elif mode == "future":
        work.get_future().wait()
        if DEV.type == "cuda":  # the future's wait orders the current stream; the host goes on
            torch.cuda.current_stream().synchronize()
        assert work.is_completed()
    elif mode == "poll":
        t0 = time.monotonic()
        while not work.is_completed():
            if time.monotonic() - t0 > 60:
                raise RuntimeError("%s: is_completed() still false after 60 s" % what)
            time.sleep(0.0002)
        work.wait()
    if DEV.type == "cuda":
        torch.cuda.current_stream().synchronize()


def gen(case, rank=None):
    g = torch.Generator()
    g.manual_seed((zlib.crc32(case.encode()) * 1000003 + a.seed * 101 + (R if rank is None else rank)) % (2 ** 62))
    return g


def rand(case, dtype, shape, rank=None, small=False):
    g = gen(case, rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype.is_floating_point:
        if small:  # products: near 1
            return (0.6 + 0.8 * torch.rand(shape, generator=g, dtype=torch.float64)).to(dtype)
        return (2 * torch.rand(shape, generator=g, dtype=torch.float64) - 1).to(dtype)
    info = torch.iinfo(dtype)
    lo, hi = (max(info.min, -3), min(info.max, 4)) if small else (info.min, info.max)
    return torch.randint(lo, hi + 1 if hi < 2 ** 62 else hi, shape, generator=g, dtype=torch.int64).to(dtype)


def tol(dtype, scale=1.0):
    """Absolute tolerance for a float result of magnitude up to `scale` after P ranks."""
    eps = {torch.float16: 2 ** -10, torch.bfloat16: 2 ** -7, torch.float32: 2 ** -23, torch.float64: 2 ** -52,
           torch.complex64: 2 ** -23, torch.complex128: 2 ** -52}.get(dtype)
    return None if eps is None else 2 * P * eps * max(1.0, scale)


def same(what, got, want, scale=1.0):
    global checks
    checks += 1
    got = got.detach().to("cpu")
    want = want.detach().to("cpu")
    if got.shape != want.shape or got.dtype != want.dtype:
        fail("%s: got %s %s, want %s %s" % (what, tuple(got.shape), got.dtype, tuple(want.shape), want.dtype))
        return
    t = tol(got.dtype, scale)
    if t is None:
        ok = torch.equal(got, want)
        err = "" if ok else " (first difference at %s)" % ((got != want).nonzero()[0].tolist(),)
    else:
        d = (got.to(torch.complex128 if got.is_complex() else torch.float64)
             - want.to(torch.complex128 if want.is_complex() else torch.float64)).abs()
        m = d.max().item() if d.numel() else 0.0
        ok = m <= t
        err = "" if ok else " (max difference %.3g > %.3g)" % (m, t)
    if not ok:
        fail("%s: differs%s" % (what, err))


def check(what, ok):
    global checks
    checks += 1
    if not ok:
        fail(what)


def as_bytes(x):
    """x's elements as a uint8 tensor (Gloo moves bytes of every dtype; it refuses some dtypes)."""
    raw = x.to("cpu").contiguous().reshape(-1)
    if raw.is_complex():
        raw = torch.view_as_real(raw).reshape(-1)
    return raw.view(torch.uint8) if raw.dtype != torch.uint8 else raw.clone()


def from_bytes(b, like):
    if like.is_complex():
        real = torch.view_as_real(torch.empty(0, dtype=like.dtype)).dtype
        return torch.view_as_complex(b.view(real).reshape(-1, 2)).reshape(like.shape)
    return (b if like.dtype == torch.uint8 else b.view(like.dtype)).reshape(like.shape)


def gathered(x):
    """Every rank's x, through Gloo (a list of CPU tensors)."""
    x = x.to("cpu").contiguous()
    if x.numel() == 0:  # Gloo dies of SIGFPE on an empty all_gather (torch 1.13)
        return [x.clone() for _ in range(P)]
    raw = x.reshape(-1)
    if raw.is_complex():
        raw = torch.view_as_real(raw).reshape(-1)
    raw = raw.view(torch.uint8) if raw.dtype != torch.uint8 else raw
    outs = [torch.empty_like(raw) for _ in range(P)]
    dist.all_gather(outs, raw, group=GLOO)
    res = []
    for o in outs:
        if x.is_complex():
            real = torch.view_as_real(torch.empty(0, dtype=x.dtype)).dtype
            res.append(torch.view_as_complex(o.view(real).reshape(-1, 2)).reshape(x.shape))
        else:
            res.append((o if x.dtype == torch.uint8 else o.view(x.dtype)).reshape(x.shape))
    return res


def local_reduce(xs, op, dtype):
    """The expected reduction of the ranks' inputs xs (CPU), as ringlet defines it."""
    st = torch.stack(xs)
    if dtype == torch.bool:
        s = st.to(torch.int64)
        if op in ("SUM", "MAX", "BOR"):
            return s.amax(0).bool()
        if op in ("PRODUCT", "MIN", "BAND"):
            return s.amin(0).bool()
        if op == "BXOR":
            return (s.sum(0) % 2).bool()
    if dtype.is_complex:
        s = st.to(torch.complex128).sum(0)
        return (s / P if op == "AVG" else s).to(dtype)
    if dtype.is_floating_point:
        s = st.to(torch.float64)
        r = {"SUM": lambda: s.sum(0), "AVG": lambda: s.sum(0) / P, "PRODUCT": lambda: s.prod(0),
             "MIN": lambda: s.amin(0), "MAX": lambda: s.amax(0)}[op]()
        return r.to(dtype)
    s = st.to(torch.int64)
    if op in ("SUM", "AVG"):
        w = s.sum(0).to(dtype)  # wraps modulo 2^bits
        return torch.div(w.to(torch.int64), P, rounding_mode="trunc").to(dtype) if op == "AVG" else w
    if op == "PRODUCT":
        return s.prod(0).to(dtype)
    return (s.amin(0) if op == "MIN" else s.amax(0)).to(dtype)


def gloo_has_reduce(dtype, op):
    return op in ("SUM", "PRODUCT", "MIN", "MAX") and dtype in (
        torch.float16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int32, torch.int64)


RED = getattr(dist.ReduceOp, "PRODUCT")


def redop(name):
    return getattr(dist.ReduceOp, name)


def dev(x):
    return x.to(DEV)


# ---------------------------------------------------------------- the cases

REDUCE_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
                 torch.int64, torch.bool, torch.complex64]
MOVE_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
               torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128]
SIZES = [0, 1, 7, 1001, 70001] if not a.quick else [1, 1001]
if a.quick:
    REDUCE_DTYPES = [torch.float32, torch.bfloat16, torch.int32, torch.bool]
    MOVE_DTYPES = [torch.float32, torch.int16, torch.complex64]


def ops_for(dtype):
    if dtype == torch.bool:
        return ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
    if dtype.is_complex:
        return ["SUM", "AVG"]
    return ["SUM", "PRODUCT", "MIN", "MAX", "AVG"]


def case_allreduce():
    for dtype in REDUCE_DTYPES:
        for op in ops_for(dtype):
            for n in SIZES:
                if n > 1001 and op not in ("SUM", "MAX") and dtype != torch.float32:
                    continue  # large sizes: two ops per dtype are enough
                case = "allreduce/%s/%s/%d" % (dtype, op, n)
                x = rand(case, dtype, (n,), small=op == "PRODUCT")
                mode = next_mode()
                t = dev(x.clone())
                w = dist.all_reduce(t, op=redop(op), async_op=mode != "sync")
                finish(w, mode, case)
                if gloo_has_reduce(dtype, op) and n:
                    want = x.clone()
                    dist.all_reduce(want, op=redop(op), group=GLOO)
                    src = "gloo"
                else:
                    want = local_reduce(gathered(x), op, dtype)
                    src = "local"
                scale = 1.0 if op != "SUM" and op != "AVG" else P
                same("%s (%s, vs %s)" % (case, mode, src), t, want, scale)


def case_allreduce_noncontig():
    for dtype in (torch.float32, torch.int64, torch.bool):
        case = "allreduce/noncontig/%s" % dtype
        x = rand(case, dtype, (33, 17))
        base = dev(x.clone().t().contiguous().t())  # column-major: not contiguous
        t = base[:, 1:]  # and a slice of it
        assert not t.is_contiguous()
        mode = next_mode()
        w = dist.all_reduce(t, op=redop("MAX"), async_op=mode != "sync")
        finish(w, mode, case)
        want = x.clone()
        if dtype == torch.bool:
            want = local_reduce(gathered(x), "MAX", dtype)
        else:
            dist.all_reduce(want, op=redop("MAX"), group=GLOO)
        same(case + " (column %s)" % mode, t, want[:, 1:])
        same(case + " column 0 untouched", base[:, 0], x[:, 0])


def case_param_noncontig():
    """A parameter in channels_last (a leaf that requires grad, not contiguous) broadcast and
    all-reduced outside no_grad, in every mode: the staged result is copied into it (the
    copy raised, autograd refusing an in-place change of a leaf, and the ranks differed)."""
    for what in ("broadcast", "all_reduce"):
        case = "param/%s" % what
        x = rand(case, torch.float32, (8, 3, 3, 3))  # a Conv2d(3, 8, 3)'s weight
        p = torch.nn.Parameter(dev(x).contiguous(memory_format=torch.channels_last))
        assert p.requires_grad and p.is_leaf and not p.is_contiguous()
        want = p.detach().clone()
        if what == "broadcast":
            dist.broadcast(want, 0, group=GLOO)
        else:
            dist.all_reduce(want, group=GLOO)
        mode = next_mode()
        fn = dist.broadcast if what == "broadcast" else dist.all_reduce
        w = fn(p, 0, async_op=mode != "sync") if what == "broadcast" else fn(p, async_op=mode != "sync")
        finish(w, mode, case)
        same(case + " (%s)" % mode, p.detach(), want)


def case_coalesced():
    for dtype in (torch.float32, torch.int32):
        case = "allreduce_coalesced/%s" % dtype
        xs = [rand(case + str(i), dtype, (k,)) for i, k in enumerate((5, 1, 300))]
        ts = [dev(x.clone()) for x in xs]
        mode = next_mode()
        w = dist.all_reduce_coalesced(ts, async_op=mode != "sync")
        finish(w, mode, case)
        wants = [x.clone() for x in xs]
        dist.all_reduce_coalesced(wants, group=GLOO)
        for i, (t, want) in enumerate(zip(ts, wants)):
            same("%s[%d] (%s, vs gloo)" % (case, i, mode), t, want, P)


def case_broadcast_reduce():
    for dtype in MOVE_DTYPES:
        for n in SIZES:
            root = (n + 1) % P
            case = "broadcast/%s/%d/root%d" % (dtype, n, root)
            x = rand(case, dtype, (n,))
            mode = next_mode()
            t = dev(x.clone())
            w = dist.broadcast(t, src=root, async_op=mode != "sync")
            finish(w, mode, case)
            want = as_bytes(x)
            if n:  # Gloo and empty tensors: see gathered()
                dist.broadcast(want, src=root, group=GLOO)
            same("%s (%s, vs gloo)" % (case, mode), t, from_bytes(want, x))
    for dtype in REDUCE_DTYPES:
        for op in ops_for(dtype)[:3]:
            n = 1001
            root = P - 1
            case = "reduce/%s/%s/root%d" % (dtype, op, root)
            x = rand(case, dtype, (n,), small=op == "PRODUCT")
            mode = next_mode()
            t = dev(x.clone())
            w = dist.reduce(t, dst=root, op=redop(op), async_op=mode != "sync")
            finish(w, mode, case)
            if gloo_has_reduce(dtype, op):
                want = x.clone()
                dist.reduce(want, dst=root, op=redop(op), group=GLOO)
                src = "gloo"
            else:
                want, src = local_reduce(gathered(x), op, dtype), "local"
            if R == root:
                same("%s (%s, vs %s)" % (case, mode, src), t, want, P)


def case_allgather():
    for dtype in MOVE_DTYPES:
        for n in SIZES:
            case = "allgather/%s/%d" % (dtype, n)
            x = rand(case, dtype, (n,))
            mode = next_mode()
            # a list of separate tensors (staged) and chunks of one tensor (direct)
            outs = [dev(torch.empty(n, dtype=dtype)) for _ in range(P)]
            w = dist.all_gather(outs, dev(x), async_op=mode != "sync")
            finish(w, mode, case)
            wants = gathered(x)  # Gloo's all_gather
            for r in range(P):
                same("%s list[%d] (%s, vs gloo)" % (case, r, mode), outs[r], wants[r])
            # outputs of another shape with as many elements (NCCL takes them; the staged copy
            # views each block as its output)
            outs = [dev(torch.empty((n, 1), dtype=dtype)) for _ in range(P)]
            mode = next_mode()
            w = dist.all_gather(outs, dev(x), async_op=mode != "sync")
            finish(w, mode, case)
            for r in range(P):
                same("%s list of (n, 1)[%d] (%s, vs gloo)" % (case, r, mode), outs[r].reshape(-1), wants[r])
            flat = dev(torch.empty(P * n, dtype=dtype))
            mode = next_mode()
            w = dist.all_gather(list(flat.chunk(P)) if n else [flat[:0]] * P, dev(x), async_op=mode != "sync")
            finish(w, mode, case)
            same("%s chunks (%s, vs gloo)" % (case, mode), flat, torch.cat(wants))
            # all_gather_into_tensor (_allgather_base): Gloo has none; its all_gather is the reference
            out2 = dev(torch.empty(P * n, dtype=dtype))
            mode = next_mode()
            w = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
            w = w(out2, dev(x), async_op=mode != "sync")
            finish(w, mode, case)
            same("%s _allgather_base (%s, vs gloo all_gather)" % (case, mode), out2, torch.cat(wants))
    # outputs of several sizes, rank r's as large as rank r's input (ProcessGroupNCCL takes
    # them; Gloo does not): every rank's input is made here from its seed, as the reference
    for dtype in (torch.float32, torch.int16, torch.complex64, torch.bool):
        for sizes in ([2 * r + 1 for r in range(P)], [37 * r for r in range(P)]):
            case = "allgather-uneven/%s/%s" % (dtype, sizes)
            xs = [rand(case, dtype, (sizes[r],), rank=r) for r in range(P)]
            mode = next_mode()
            outs = [dev(torch.full((sizes[r],), 1, dtype=dtype)) for r in range(P)]
            if P > 1:  # one output not contiguous (staged)
                outs[P - 1] = dev(torch.ones(sizes[P - 1], 2, dtype=dtype))[:, 0]
            w = dist.all_gather(outs, dev(xs[R]), async_op=mode != "sync")
            finish(w, mode, case)
            for r in range(P):
                same("%s[%d] (%s, vs its seed)" % (case, r, mode), outs[r], xs[r])
    if P > 1:
        expect_error("all_gather of several sizes, this rank's wrong", lambda: dist.all_gather(
            [dev(torch.empty(r + 1)) for r in range(P)], dev(torch.ones(R + 2))), "this rank's", "elements")
    # allgather_coalesced: several tensors of several shapes (torch wants one dtype)
    case = "allgather_coalesced"
    xs = [rand(case + "a", torch.float32, (3, 4)), rand(case + "b", torch.float32, (5,)),
          rand(case + "c", torch.float32, (2,))]
    outs = [[dev(torch.empty_like(x)) for x in xs] for _ in range(P)]
    mode = next_mode()
    w = dist.all_gather_coalesced(outs, [dev(x) for x in xs], async_op=mode != "sync")
    finish(w, mode, case)
    wants = [[torch.empty_like(x) for x in xs] for _ in range(P)]
    dist.all_gather_coalesced(wants, xs, group=GLOO)
    for r in range(P):
        for i in range(len(xs)):
            same("%s[%d][%d] (%s, vs gloo)" % (case, r, i, mode), outs[r][i], wants[r][i])


def _manager():
    """torch 2.x's _coalescing_manager(group, device, async_ops), or None (torch 1.13's takes
    a list of Works and has no fast path)."""
    import inspect
    m = getattr(dist.distributed_c10d, "_coalescing_manager", None)
    return m if m is not None and "async_ops" in inspect.signature(m).parameters else None


def coalesced(kind, outs, ins, op):
    """The Work torch 2.x's _coalescing_manager(device=DEV, async_ops=True) gives for the
    all_gather_into_tensor / reduce_scatter_tensor / all_reduce calls of outs and ins: one
    call of the group's fast-path method inside _start_coalescing and _end_coalescing, whose
    Work covers it. Without torch 2.x's manager the group's methods are called as it calls them."""
    m = _manager()
    if m is not None:
        with m(device=DEV, async_ops=True) as cm:
            for o, i in zip(outs, ins):
                if kind == "allgather":
                    dist.all_gather_into_tensor(o, i, async_op=True)
                elif kind == "reduce_scatter":
                    dist.reduce_scatter_tensor(o, i, op=redop(op), async_op=True)
                else:
                    dist.all_reduce(o, op=redop(op), async_op=True)
        assert len(cm.works) == 1, cm.works
        return cm.works[0]
    pg = dist.distributed_c10d._get_default_group()
    pg._start_coalescing(DEV)
    if kind == "allgather":
        pg.allgather_into_tensor_coalesced(outs, ins)
    elif kind == "reduce_scatter":
        opts = dist.ReduceScatterOptions()
        opts.reduceOp = redop(op)
        pg.reduce_scatter_tensor_coalesced(outs, ins, opts)
    else:
        opts = torch._C._distributed_c10d.AllreduceCoalescedOptions()
        opts.reduceOp = redop(op)
        pg.allreduce_coalesced(outs, opts)
    return pg._end_coalescing(DEV)


def case_coalesced_fast():
    """torch 2.x's coalescing fast path (_coalescing_manager): the Work it returns must cover
    every operation. On CPU, ranks other than 0 launch only after rank 0 has seen its Work
    not yet complete (they cannot have taken part), so a Work that covers nothing fails."""
    global checks
    shapes = [(3, 5), (7,), (1,), (2, 2)] if not a.quick else [(3, 5), (1,)]
    for dtype in (torch.float32, torch.int64):
        for kind in ("allgather", "reduce_scatter", "allreduce"):
            op = "AVG" if dtype.is_floating_point and kind != "allgather" else "SUM"
            case = "coalesced_fast/%s/%s/%s" % (kind, dtype, op)
            mode = next_mode()
            if kind == "allgather":
                xs = [rand(case + str(k), dtype, s) for k, s in enumerate(shapes)]
                outs = [dev(torch.empty((P * s[0],) + s[1:], dtype=dtype)) for s in shapes]
                outs[0] = dev(torch.empty(shapes[0][1], P * shapes[0][0], dtype=dtype).t())  # staged: a step after
            elif kind == "reduce_scatter":
                xs = [rand(case + str(k), dtype, (P * s[0],) + s[1:]) for k, s in enumerate(shapes)]
                outs = [dev(torch.empty(s, dtype=dtype)) for s in shapes]
                outs[0] = dev(torch.empty(shapes[0][1], shapes[0][0], dtype=dtype).t())
            else:
                xs = [rand(case + str(k), dtype, s) for k, s in enumerate(shapes)]
                outs = [dev(x).clone() for x in xs]
            ordered = DEV.type == "cpu" and P > 1
            if ordered and R != 0:
                dist.barrier(group=GLOO)
            w = coalesced(kind, outs, [dev(x) for x in xs] if kind != "allreduce" else outs, op)
            if ordered and R == 0:
                checks += 1
                if w.is_completed():
                    fail("%s: the Work of _end_coalescing was complete before the other ranks took part" % case)
                dist.barrier(group=GLOO)
            finish(w, "poll" if mode == "sync" else mode, case)
            for k, x in enumerate(xs):
                allx = gathered(x)
                if kind == "allgather":
                    want = torch.cat(allx)
                elif kind == "reduce_scatter":
                    want = local_reduce([y[R * shapes[k][0]:(R + 1) * shapes[k][0]] for y in allx], op, dtype)
                else:
                    want = local_reduce(allx, op, dtype)
                same("%s[%d] (%s)" % (case, k, mode), outs[k], want, P)
    # the methods' own checks, inside a block that torch's manager then leaves open (it
    # raises on without _end_coalescing): the next block must work
    pg = dist.distributed_c10d._get_default_group()
    pg._start_coalescing(DEV)
    expect_error("allgather_into_tensor_coalesced of mismatched lists",
                 lambda: pg.allgather_into_tensor_coalesced([dev(torch.empty(2 * P))], []), "1 output", "0 inputs")
    expect_error("reduce_scatter_tensor_coalesced of a short input",
                 lambda: pg.reduce_scatter_tensor_coalesced([dev(torch.empty(2))], [dev(torch.empty(3))]),
                 "must hold %d x" % P)
    checks += 1
    if _window() is not None:  # on CUDA, the thread's later calls would only be recorded
        fail("coalesced_fast: a call that raised inside a block left the thread's window open")
    case = "coalesced_fast/after a block left open"
    x = rand(case, torch.int32, (5,))
    out = dev(torch.empty(5 * P, dtype=torch.int32))
    finish(coalesced("allgather", [out], [dev(x)], "SUM"), "wait", case)
    same(case, out, torch.cat(gathered(x)))
    # a block that torch left open (an error raised inside the manager, not by the group):
    # the group's next block closes it, and after that block's end no window is left
    pg._start_coalescing(DEV)
    finish(coalesced("allgather", [out], [dev(x)], "SUM"), "wait", case + ", again")
    same(case + ", again", out, torch.cat(gathered(x)))
    checks += 1
    if _window() is not None:
        fail("coalesced_fast: a block left open was never closed (the thread's calls would only be recorded)")
    # a block of another group inside a block (e.g. batch_isend_irecv on a subgroup inside a
    # coalescing manager): the outer end covers both; on CPU rank 0 sees it incomplete
    # before the others launch
    case = "coalesced_fast/nested"
    other = dist.new_group()  # ringlet's too, over every rank
    x, y = rand(case + "x", torch.int64, (6,)), rand(case + "y", torch.int64, (4,))
    outx, outy = dev(torch.empty(6 * P, dtype=torch.int64)), dev(torch.empty(4, dtype=torch.int64))
    ordered = DEV.type == "cpu" and P > 1
    if ordered and R != 0:
        dist.barrier(group=GLOO)
    pg._start_coalescing(DEV)
    pg.allgather_into_tensor_coalesced([outx], [dev(x)])
    other._start_coalescing(DEV)
    other.allreduce_coalesced([outy.copy_(dev(y))])
    inner = other._end_coalescing(DEV)
    w = pg._end_coalescing(DEV)
    if ordered and R == 0:
        checks += 1
        if w.is_completed():
            fail("%s: the outer block's Work was complete before the other ranks took part" % case)
        dist.barrier(group=GLOO)
    finish(w, "wait", case)
    finish(inner, "wait", case)
    same(case + " outer", outx, torch.cat(gathered(x)))
    same(case + " inner", outy, local_reduce(gathered(y), "SUM", torch.int64))
    dist.destroy_process_group(other)


def case_reduce_scatter():
    for dtype in REDUCE_DTYPES:
        for op in ops_for(dtype)[:4]:
            for n in (SIZES[1:3] if not a.quick else [5]):
                case = "reduce_scatter/%s/%s/%d" % (dtype, op, n)
                ins = [rand(case + str(q), dtype, (n,), small=op == "PRODUCT") for q in range(P)]
                # the reference: every rank's list through Gloo, reduced here, block R
                allx = gathered(torch.stack(ins))
                want = local_reduce([x[R] for x in allx], op, dtype)
                out = dev(torch.empty(n, dtype=dtype))
                mode = next_mode()
                w = dist.reduce_scatter(out, [dev(i) for i in ins], op=redop(op), async_op=mode != "sync")
                finish(w, mode, case)
                same("%s list (%s, vs gloo-gathered)" % (case, mode), out, want, P)
                out2 = dev(torch.empty(n, dtype=dtype))
                mode = next_mode()
                w = dist.reduce_scatter_tensor(out2, dev(torch.cat(ins)), op=redop(op), async_op=mode != "sync") \
                    if hasattr(dist, "reduce_scatter_tensor") else \
                    dist._reduce_scatter_base(out2, dev(torch.cat(ins)), op=redop(op), async_op=mode != "sync")
                finish(w, mode, case)
                same("%s tensor (%s, vs gloo-gathered)" % (case, mode), out2, want, P)
    # input tensors of several sizes, block q as large as rank q's output (ProcessGroupNCCL
    # takes them; Gloo does not): every rank's inputs are made here from their seeds
    for dtype, op in ((torch.int32, "SUM"), (torch.int32, "MAX"), (torch.float32, "AVG"), (torch.bool, "BXOR"),
                      (torch.complex64, "SUM")):
        for sizes in ([2 * q + 1 for q in range(P)], [37 * q for q in range(P)]):
            case = "reduce_scatter-uneven/%s/%s/%s" % (dtype, op, sizes)
            ins = {r: [rand(case + str(q), dtype, (sizes[q],), rank=r) for q in range(P)] for r in range(P)}
            want = local_reduce([ins[r][R] for r in range(P)], op, dtype)
            mine = [dev(x) for x in ins[R]]
            if P > 1:  # one input not contiguous (staged; block P - 1 has 3 elements or more)
                mine[P - 1] = dev(torch.stack([ins[R][P - 1], ins[R][P - 1]], 1))[:, 0]
            out = dev(torch.zeros(sizes[R], 2, dtype=dtype))[:, 1] if R == P - 1 else dev(torch.zeros(sizes[R], dtype=dtype))
            mode = next_mode()
            w = dist.reduce_scatter(out, mine, op=redop(op), async_op=mode != "sync")
            finish(w, mode, case)
            same("%s (%s, vs its seeds)" % (case, mode), out, want, P)
    if P > 1:
        expect_error("reduce_scatter from blocks of several sizes, this rank's wrong", lambda: dist.reduce_scatter(
            dev(torch.empty(R + 2)), [dev(torch.ones(q + 1)) for q in range(P)]), "this rank's", "elements")


def case_reduce_scatter_apart():
    # separate tensors that happen to lie back to back (one bytearray, a tensor per block):
    # not one tensor, so no view may span them; the result as with any list
    n = 6
    ins = [rand("rs-apart%d" % q, torch.float32, (n,)) for q in range(P)]
    buf = bytearray(P * n * 4)
    apart = [torch.frombuffer(buf, dtype=torch.float32, count=n, offset=q * n * 4) for q in range(P)]
    for q in range(P):
        apart[q].copy_(ins[q])
    want = local_reduce([x[R] for x in gathered(torch.stack(ins))], "SUM", torch.float32)
    out = dev(torch.empty(n))
    dist.reduce_scatter(out, [dev(t) for t in apart])
    same("reduce_scatter of back-to-back separate tensors", out, want, P)


def case_alltoall():
    for dtype in MOVE_DTYPES:
        for n in (SIZES[1:] if not a.quick else [3]):
            case = "alltoall/%s/%d" % (dtype, n)
            x = rand(case, dtype, (P * n,))
            out = dev(torch.empty(P * n, dtype=dtype))
            mode = next_mode()
            w = dist.all_to_all_single(out, dev(x), async_op=mode != "sync")
            finish(w, mode, case)
            want = torch.empty_like(as_bytes(x))
            if n:
                dist.all_to_all_single(want, as_bytes(x), group=GLOO)
            want = from_bytes(want, x)
            same("%s single (%s, vs gloo)" % (case, mode), out, want)
    # uneven splits: rank r sends (r + q) % 3 rows of 5 to rank q
    for dtype in (torch.float32, torch.int8, torch.complex64):
        case = "alltoall/splits/%s" % dtype
        ins_sp = [(R + q) % 3 for q in range(P)]
        out_sp = [(q + R) % 3 for q in range(P)]
        x = rand(case, dtype, (sum(ins_sp), 5))
        out = dev(torch.empty(sum(out_sp), 5, dtype=dtype))
        mode = next_mode()
        w = dist.all_to_all_single(out, dev(x), out_sp, ins_sp, async_op=mode != "sync")
        finish(w, mode, case)
        row = as_bytes(x[:1]).numel()
        wb = torch.empty(sum(out_sp) * row, dtype=torch.uint8)
        dist.all_to_all_single(wb, as_bytes(x), [s * row for s in out_sp], [s * row for s in ins_sp], group=GLOO)
        want = from_bytes(wb, torch.empty(sum(out_sp), 5, dtype=dtype))
        same("%s (%s, vs gloo)" % (case, mode), out, want)
        # all_to_all of lists (Gloo has none): the same blocks, compared with the above
        ins = list(dev(x).split(ins_sp))
        outs = [dev(torch.empty(s, 5, dtype=dtype)) for s in out_sp]
        mode = next_mode()
        w = dist.all_to_all(outs, ins, async_op=mode != "sync")
        finish(w, mode, case)
        same("%s lists (%s, vs gloo all_to_all_single)" % (case, mode), torch.cat(outs), want)
    # Even blocks, as chunks of one tensor on even ranks (one ringlet all-to-all) and as
    # tensors of their own on odd ones (sends and receives): the two match on the wire.
    case = "alltoall/mixed"
    x = rand(case, torch.int32, (P, 6))
    if R % 2 == 0:
        ins, out = list(dev(x).chunk(P)), dev(torch.empty(P, 6, dtype=torch.int32))
        outs = list(out.chunk(P))
    else:
        ins = [dev(x[q].clone()) for q in range(P)]
        outs = [dev(torch.empty(6, dtype=torch.int32)) for _ in range(P)]
    dist.all_to_all(outs, ins)
    want = torch.empty(P * 6, dtype=torch.int32)
    dist.all_to_all_single(want, x.flatten(), group=GLOO)
    same("%s (even ranks one all-to-all, odd ones sends and receives)" % case, torch.cat([o.flatten() for o in outs]),
         want)


def case_first_exchange():
    """A fresh group (a communicator with only its ring's connections) whose first call
    receives from ranks it has no connection from: the uneven all-to-all, then a batch that
    lists every receive before every send, to and from every other rank. Over TCP
    (torch_backend.sh also runs this file with RINGLET_TRANSPORT=tcp), a receive posted
    before this rank's sends waited in its accept for a peer that did the same, until the
    deadline."""
    if P < 3:
        return
    for what in ("alltoall", "batch"):
        g = dist.new_group()  # ringlet, every rank: a new communicator
        case = "first_exchange/%s" % what
        if what == "alltoall":
            sp = lambda q, k: (q + k) % 3 + 1  # rows rank q sends rank k  # noqa: E731
            xs = [rand(case, torch.float32, (sum(sp(q, k) for k in range(P)), 3), rank=q) for q in range(P)]
            out = dev(torch.empty(sum(sp(q, R) for q in range(P)), 3))
            dist.all_to_all_single(out, dev(xs[R]), [sp(q, R) for q in range(P)], [sp(R, k) for k in range(P)],
                                   group=g)
            want = torch.cat([xs[q][sum(sp(q, k) for k in range(R)):][:sp(q, R)] for q in range(P)])
            same(case, out, want)
        else:
            xs = [rand(case, torch.int64, (7,), rank=q) for q in range(P)]
            got = [dev(torch.empty(7, dtype=torch.int64)) for _ in range(P)]
            ops = [dist.P2POp(dist.irecv, got[q], q, g) for q in range(P) if q != R]
            ops += [dist.P2POp(dist.isend, dev(xs[R]), q, g) for q in range(P) if q != R]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            if DEV.type == "cuda":
                torch.cuda.current_stream().synchronize()
            for q in range(P):
                if q != R:
                    same("%s from rank %d" % (case, q), got[q], xs[q])
        dist.destroy_process_group(g)


def case_gather_scatter():
    for dtype in MOVE_DTYPES:
        n = 1001 if not a.quick else 7
        root = 1 % P
        case = "gather/%s" % dtype
        x = rand(case, dtype, (n,))
        outs = [dev(torch.empty(n, dtype=dtype)) for _ in range(P)] if R == root else None
        mode = next_mode()
        w = dist.gather(dev(x), outs, dst=root, async_op=mode != "sync")
        finish(w, mode, case)
        xb = as_bytes(x)
        wants = [torch.empty_like(xb) for _ in range(P)] if R == root else None
        dist.gather(xb, wants, dst=root, group=GLOO)
        if R == root:
            for r in range(P):
                same("%s[%d] (%s, vs gloo)" % (case, r, mode), outs[r], from_bytes(wants[r], x))
        # outputs of another shape with as many elements, as all_gather's
        outs = [dev(torch.empty((n, 1), dtype=dtype)) for _ in range(P)] if R == root else None
        mode = next_mode()
        w = dist.gather(dev(x), outs, dst=root, async_op=mode != "sync")
        finish(w, mode, case)
        if R == root:
            for r in range(P):
                same("%s of (n, 1)[%d] (%s, vs gloo)" % (case, r, mode), outs[r].reshape(-1), from_bytes(wants[r], x))
        case = "scatter/%s" % dtype
        ins = [rand(case + str(q), dtype, (n,)) for q in range(P)]
        out = dev(torch.empty(n, dtype=dtype))
        mode = next_mode()
        w = dist.scatter(out, [dev(i) for i in ins] if R == root else None, src=root, async_op=mode != "sync")
        finish(w, mode, case)
        want = torch.empty_like(as_bytes(ins[0]))
        dist.scatter(want, [as_bytes(i) for i in ins] if R == root else None, src=root, group=GLOO)
        same("%s (%s, vs gloo)" % (case, mode), out, from_bytes(want, ins[0]))


def case_barrier_after_future():
    """(CPU) An all_gather into separate tensors (staged, copied out once done) whose future
    was taken, then a blocking barrier: the barrier waits for it, copies out included, as
    Gloo's does. The completion thread is held until the barrier asks for the all_gather's
    end (then it is let go): a barrier that did not wait returned with the outputs stale."""
    if DEV.type != "cpu":
        return
    from ringlet import _backend_work as bw
    gate = threading.Event()
    run = bw._CpuWork._run_requests

    def held(self, block):
        if threading.current_thread().name.startswith("ringlet-completion"):
            gate.wait(60)
        return run(self, block)
    bw._CpuWork._run_requests = held
    try:
        outs = [torch.full((4,), -1.0) for _ in range(P)]
        w = dist.all_gather(outs, torch.full((4,), float(R)), async_op=True)
        fut = w.get_future()
        finish_one = w._finish

        def asked():  # the barrier waits for it: the completion thread may go on
            gate.set()
            finish_one()
        w._finish = asked
        dist.barrier()
        seen = [o.tolist() for o in outs]
        gate.set()
        fut.wait()
    finally:
        bw._CpuWork._run_requests = run
        gate.set()
    check("barrier after an all_gather whose future was taken: outputs %s" % seen,
          seen == [[float(r)] * 4 for r in range(P)])


def case_p2p_barrier():
    # a ring: every rank sends to the next and receives from the previous, async both ways
    # (CPU: both posted at once, or batch_isend_irecv; CUDA: batch_isend_irecv, one ringlet
    # group, as with NCCL: device sends and receives outside a group run one by one). The
    # bfloat16 and bool receives are strided: received into staging, copied out after.
    for dtype in (torch.float32, torch.int64, torch.bfloat16, torch.bool):
        case = "sendrecv/%s" % dtype
        x = rand(case, dtype, (1001,))
        strided = dtype in (torch.bfloat16, torch.bool)
        got = dev(torch.empty(2002, dtype=dtype))[::2] if strided else dev(torch.empty(1001, dtype=dtype))
        if DEV.type == "cuda" or dtype in (torch.int64, torch.bool):
            ws = dist.batch_isend_irecv([dist.P2POp(dist.isend, dev(x), (R + 1) % P),
                                         dist.P2POp(dist.irecv, got, (R - 1) % P)])
        else:
            ws = [dist.isend(dev(x), (R + 1) % P), dist.irecv(got, (R - 1) % P)]
        for w in ws:
            w.wait()
        if DEV.type == "cuda":
            torch.cuda.current_stream().synchronize()
        want = torch.empty_like(as_bytes(x))
        gs = [dist.isend(as_bytes(x), (R + 1) % P, group=GLOO), dist.irecv(want, (R - 1) % P, group=GLOO)]
        for w in gs:
            w.wait()
        same("%s (isend/irecv, vs gloo)" % case, got, from_bytes(want, x))
    # blocking send/recv between rank 0 and the last rank
    case = "sendrecv/blocking"
    x = rand(case, torch.float64, (17,), rank=0)
    t = dev(x.clone() if R == 0 else torch.zeros(17, dtype=torch.float64))
    if R == 0:
        dist.send(t, P - 1)
    elif R == P - 1:
        dist.recv(t, 0)
        same(case, t, x)
    for mode in ("sync", "wait", "future", "poll"):
        w = dist.barrier(async_op=mode != "sync")
        finish(w, mode, "barrier")
    # wait(timeout): a receive whose send comes only after the receiver's wait timed out
    # (by construction: the sender waits for a barrier the receiver enters after its timeout)
    if DEV.type == "cpu":
        t = torch.zeros(3)
        if R == 1:
            w = dist.irecv(t, 0)
            expect_error("wait(timeout) before the send", lambda: w.wait(datetime.timedelta(seconds=0.2)),
                         "timed out", "recv")
            dist.barrier()
            w.wait()
            same("recv after a timed-out wait", t, torch.full((3,), 7.0))
        elif R == 0:
            dist.barrier()
            dist.send(torch.full((3,), 7.0), 1)
        else:
            dist.barrier()
    # a barrier completes the operations before it, as Gloo's does: three async all_gathers
    # into separate tensors (staged, copied out when completed), launched on rank 0 before
    # the other ranks call theirs (by construction: they wait for rank 0 in a Gloo barrier),
    # so that no later launch can have completed the last of them; after dist.barrier()
    # their outputs hold the data, before any wait
    if DEV.type == "cpu":
        xs = [rand("barrier-completes%d" % k, torch.float32, (257,)) for k in range(3)]
        outs = [[torch.full((257,), -1.0) for _ in range(P)] for _ in range(3)]
        if R == 0:
            ws = [dist.all_gather(outs[k], xs[k], async_op=True) for k in range(3)]
            dist.barrier(group=GLOO)
        else:
            dist.barrier(group=GLOO)
            ws = [dist.all_gather(outs[k], xs[k], async_op=True) for k in range(3)]
        dist.barrier()
        for k in range(3):
            wants = [torch.empty(257) for _ in range(P)]
            dist.all_gather(wants, xs[k], group=GLOO)
            for q in range(P):
                same("all_gather %d's output %d after a barrier, before its wait" % (k, q), outs[k][q], wants[q])
        for w in ws:
            w.wait()
    else:
        # CUDA: each call returns once its device work is done (or at once, with streams
        # held), and the copies out of staging into separate tensors are queued on the
        # group's stream: after dist.barrier() the current stream (which same() copies
        # on) comes after them, as after ProcessGroupNCCL's barrier
        xs = [dev(rand("barrier-completes%d" % k, torch.float32, (257,))) for k in range(3)]
        outs = [[dev(torch.full((257,), -1.0)) for _ in range(P)] for _ in range(3)]
        ws = [dist.all_gather(outs[k], xs[k], async_op=True) for k in range(3)]
        dist.barrier()
        for k in range(3):
            wants = [torch.empty(257) for _ in range(P)]
            dist.all_gather(wants, xs[k].cpu(), group=GLOO)
            for q in range(P):
                same("all_gather %d's output %d after a barrier, before its wait" % (k, q), outs[k][q], wants[q])
        for w in ws:
            w.wait()
    # a receive pending across a collective whose messages have the same length (12 bytes):
    # rank 1 posts it before the all_reduce, rank 0 sends after it; the receive must get
    # the send's data and the all_reduce its own (Gloo keeps them apart with tags). CPU
    # only: on a GPU, as with NCCL, a device call may wait for streams held by earlier ones
    if DEV.type != "cpu":
        return
    got = dev(torch.zeros(3))
    w = dist.irecv(got, 0) if R == 1 else None
    a3 = dev(torch.full((3,), float(R + 1)))
    dist.all_reduce(a3)
    if R == 0:
        dist.send(dev(torch.full((3,), -5.0)), 1)
    if w is not None:
        w.wait()
        same("recv pending across an all_reduce", got, torch.full((3,), -5.0))
    same("all_reduce while a recv was pending", a3, torch.full((3,), float(P * (P + 1) // 2)))
    global checks
    checks += 1


def case_future_callbacks():
    # A then() callback that waits for another operation's future, as torch's PowerSGD
    # hook does: the futures are completed by a thread other than the one that runs the
    # callbacks (else the inner future would wait for the thread blocked in the callback).
    # And a receive's future still pending does not hold up a collective's: rank 1 posts a
    # receive whose send rank 0 makes only after a barrier that rank 1 enters once its
    # all_reduce future is done. Bounded waits (60 s): a hang is reported, not waited out.
    global checks
    if DEV.type != "cpu":
        return
    a = torch.full((5,), float(R + 1))
    b = torch.full((3,), float(2 * R))
    inner = []

    def cb(_):
        fb = dist.all_reduce(b, async_op=True).get_future()
        inner.append(fb)
        return fb.wait()
    done = threading.Event()
    dist.all_reduce(a, async_op=True).get_future().then(cb).then(lambda _: done.set())
    if not done.wait(60):
        note("FAIL a then() callback waiting for another all_reduce's future: not done after 60 s (hung)")
        os._exit(1)
    same("future callback: outer all_reduce", a, torch.full((5,), float(P * (P + 1) // 2)))
    same("future callback: inner all_reduce", b, torch.full((3,), float(P * (P - 1))))
    if P < 2:
        return
    got = torch.zeros(4)
    rw = dist.irecv(got, 0) if R == 1 else None
    rf = rw.get_future() if rw is not None else None
    c = torch.full((2,), 1.0)
    done = threading.Event()
    dist.all_reduce(c, async_op=True).get_future().then(lambda _: done.set())
    if not done.wait(60):
        note("FAIL an all_reduce's future behind a pending receive's: not done after 60 s")
        os._exit(1)
    same("all_reduce future beside a pending receive", c, torch.full((2,), float(P)))
    dist.barrier()
    if R == 0:
        dist.send(torch.arange(4.0), 1)
    if rf is not None:
        rf.wait()
        same("the receive after the barrier", got, torch.arange(4.0))
    checks += 1


def case_objects():
    obj = [{"rank": R, "s": "x" * R}]
    if R == 0:
        obj = [{"from": 0, "data": list(range(5))}]
    dist.broadcast_object_list(obj, src=0)
    same("broadcast_object_list", torch.tensor(obj[0]["data"]), torch.arange(5))
    allo = [None] * P
    dist.all_gather_object(allo, {"rank": R})
    same("all_gather_object", torch.tensor([o["rank"] for o in allo]), torch.arange(P))


def case_subgroup():
    if P < 3:
        return
    ranks = list(range(1, P))
    sub = dist.new_group(ranks)  # ringlet, like the default group
    gsub = dist.new_group(ranks, backend="gloo")
    if R in ranks:
        assert dist.get_backend(sub) == "ringlet"
        for dtype in (torch.float32, torch.int32):
            case = "subgroup/allreduce/%s" % dtype
            x = rand(case, dtype, (1001,))
            t = dev(x.clone())
            mode = next_mode()
            w = dist.all_reduce(t, group=sub, async_op=mode != "sync")
            finish(w, mode, case)
            want = x.clone()
            dist.all_reduce(want, group=gsub)
            same("%s (%s, vs gloo subgroup)" % (case, mode), t, want, P)
        t = dev(torch.full((4,), float(R)))
        dist.broadcast(t, src=ranks[-1], group=sub)  # a global rank as root
        same("subgroup/broadcast from global rank %d" % ranks[-1], t, torch.full((4,), float(ranks[-1])))
        core = sub._core  # the communicator's holder: emptied when the group is destroyed
        dist.destroy_process_group(sub)
        del sub
        global checks
        checks += 1
        if core.holder[0] is not None:
            fail("subgroup: destroy_process_group left its ringlet communicator alive")
        dist.destroy_process_group(gsub)
    # the default group still works
    t = dev(torch.ones(3))
    dist.all_reduce(t)
    same("allreduce after the subgroup's destroy", t, torch.full((3,), float(P)))


def case_torch2_api():
    """What torch 2.x asks of a group made by a Python backend: batch_isend_irecv as one
    coalescing block (torch coalesces only a group whose type is exactly ProcessGroup; on
    CUDA a ring of sends posted one by one would hang), the group's name (torch's getter
    raises without a registered backend), _get_backend, and newer torch's names of three
    operations. Checked through the methods themselves, so under torch 1.13 too."""
    global checks
    from ringlet._backend_group import ProcessGroupRinglet
    pg = dist.group.WORLD
    starts, ends = [], []
    orig_start, orig_end = ProcessGroupRinglet._start_coalescing, ProcessGroupRinglet._end_coalescing

    def spy_start(self, *args):
        starts.append(args)
        return orig_start(self, *args)

    def spy_end(self, *args):
        ends.append(args)
        return orig_end(self, *args)
    ProcessGroupRinglet._start_coalescing, ProcessGroupRinglet._end_coalescing = spy_start, spy_end
    try:
        case = "batch_isend_irecv/float64"
        x = rand(case, torch.float64, (333,))
        got = dev(torch.empty(333, dtype=torch.float64))
        ws = dist.batch_isend_irecv([dist.P2POp(dist.irecv, got, (R - 1) % P),
                                     dist.P2POp(dist.isend, dev(x), (R + 1) % P)])
        for w in ws:
            w.wait()
    finally:
        ProcessGroupRinglet._start_coalescing, ProcessGroupRinglet._end_coalescing = orig_start, orig_end
    if DEV.type == "cuda":
        torch.cuda.current_stream().synchronize()
    checks += 1
    if len(starts) != 1 or len(ends) != 1 or len(ws) != 2:
        fail("batch_isend_irecv: %d start(s) and %d end(s) of a coalescing block, %d Works (expected 1, 1, 2)"
             % (len(starts), len(ends), len(ws)))
    same(case, got, rand(case, torch.float64, (333,), rank=(R - 1) % P))
    expect_error("batch_isend_irecv over two devices", lambda: dist.batch_isend_irecv(
        [dist.P2POp(dist.isend, dev(x), (R + 1) % P), dist.P2POp(dist.irecv, torch.empty(3, device="meta"), (R - 1) % P)]),
        "one batch per device")
    # the group's name: torch's, as torch gave it to the backend and knows it
    c10d = dist.distributed_c10d
    names = c10d._world.pg_names if hasattr(c10d, "_world") else c10d._pg_names
    checks += 1
    if pg.group_name != names[pg] or pg.getGroupName() != names[pg]:
        fail("group name: %r / %r, torch knows the group as %r" % (pg.group_name, pg.getGroupName(), names[pg]))
    checks += 1
    if pg._get_backend(torch.device("cpu")) is not pg or pg._get_backend(DEV) is not pg or pg.supports_splitting:
        fail("_get_backend: not the group itself, or supports_splitting set")
    expect_error("_get_backend of another device type", lambda: pg._get_backend(torch.device("meta")),
                 "meta", "cpu and cuda")
    # newer torch's names: all_gather_single, reduce_scatter_single, all_to_all_single
    n = 5
    case = "all_gather_single/int32"
    x = rand(case, torch.int32, (n,))
    out = dev(torch.empty(P * n, dtype=torch.int32))
    pg.all_gather_single(out, dev(x), _C10D.AllgatherOptions()).wait()
    want = torch.cat([rand(case, torch.int32, (n,), rank=q) for q in range(P)])
    same(case, out, want)
    case = "reduce_scatter_single/int64"
    xs = [rand(case, torch.int64, (P * n,), rank=q, small=True) for q in range(P)]
    out = dev(torch.empty(n, dtype=torch.int64))
    pg.reduce_scatter_single(out, dev(xs[R]), _C10D.ReduceScatterOptions()).wait()
    same(case, out, sum(xs)[R * n:(R + 1) * n])
    case = "all_to_all_single/float32"
    xs = [rand(case, torch.float32, (P * n,), rank=q) for q in range(P)]
    out = dev(torch.empty(P * n, dtype=torch.float32))
    pg.all_to_all_single(out, dev(xs[R]), [], [], _C10D.AllToAllOptions()).wait()
    same(case, out, torch.cat([xs[q][R * n:(R + 1) * n] for q in range(P)]))
    if DEV.type == "cuda":
        torch.cuda.current_stream().synchronize()


def freed(ref):
    """Whether the weakly referenced tensor is freed: at once, or once a deliverer thread
    has let go of a future it completed (after the waiter woke; bounded)."""
    import gc
    until = time.monotonic() + 30
    while True:
        gc.collect()
        if ref() is None:
            return True
        if time.monotonic() > until:
            return False
        time.sleep(0.001)


def case_outputs_let_go():
    """The group keeps Works a while after their end for torch's C++ code, but not the
    tensors the program dropped: an all-reduce's tensor is freed once the program lets go of
    it and its Work (each mode), also one never waited for (after later operations); a Work
    the program holds still returns its tensor from result(), and one whose tensor was
    dropped says so."""
    import weakref
    for mode in MODES:
        case = "let-go/" + mode
        x = rand(case, torch.int32, (1001,))
        t = dev(x.clone())
        ref = weakref.ref(t)
        w = dist.all_reduce(t, async_op=mode != "sync")
        finish(w, mode, case)
        same(case, t, local_reduce(gathered(x), "SUM", torch.int32), P)
        del t, w
        check(case + ": the tensor freed once the program dropped it", freed(ref))
    t = dev(rand("let-go/unwaited", torch.int32, (1001,)))
    ref = weakref.ref(t)
    dist.all_reduce(t, async_op=True)
    del t
    held = dev(torch.ones(3, dtype=torch.int32))
    kept = dist.all_reduce(held, async_op=True)
    dropped_t = dev(torch.ones(5, dtype=torch.int32))
    dropped = dist.all_reduce(dropped_t, async_op=True)
    kept.wait()
    dropped.wait()
    del dropped_t
    for _ in range(4):  # later launches complete the one never waited for, and let go of it
        dist.all_reduce(dev(torch.ones(2)), async_op=True).wait()
    check("let-go/unwaited: the tensor freed once the program dropped it", freed(ref))
    res = kept.result()
    check("let-go: result() of a held Work", len(res) == 1 and res[0] is held)
    same("let-go: its tensor", held, torch.full((3,), P, dtype=torch.int32))
    expect_error("result() of a Work whose tensor was dropped", dropped.result, "freed")
    # a future asked for after the group let go: made from the tensors the program holds,
    # or failing (never left incomplete) where it dropped them
    f = kept.get_future()
    if DEV.type == "cuda":
        torch.cuda.current_stream().synchronize()
    val = f.wait()
    check("let-go: a late get_future() of a held Work", len(val) == 1 and val[0] is held)
    for k in range(2):  # a second ask must not find a future the first left incomplete
        try:
            f = dropped.get_future()
        except RuntimeError as e:
            fail("a late get_future() of a Work whose tensor was dropped (ask %d): raised %s" % (k, e))
            continue
        check("a late get_future() (ask %d) of a Work whose tensor was dropped is complete" % k, f.done())
        if f.done():
            expect_error("a late get_future() of a Work whose tensor was dropped", f.wait, "freed")


def expect_error(what, fn, *words, kinds=(RuntimeError,)):
    global checks
    checks += 1
    try:
        fn()
    except kinds as e:
        msg = str(e)
        missing = [w for w in words if w not in msg]
        if missing:
            fail("%s: the error does not say %s: %s" % (what, missing, msg))
        elif R == 0:
            note("%s: %s" % (what, msg.splitlines()[0][:200]))
        return
    except Exception as e:  # noqa: BLE001
        fail("%s: raised %s, not %s: %s" % (what, type(e).__name__, "/".join(k.__name__ for k in kinds), e))
        return
    fail("%s: no error" % what)


def case_sync_form():
    """async_op=False takes ringlet's blocking form, on the caller's thread (the group's
    methods find torch's caller through the wrapper that closes a coalescing window);
    async_op=True the non-blocking one. Read from the launches the group makes."""
    global checks
    from ringlet import _backend_work as bw
    seen = []
    orig = bw._Launch.__init__

    def spy(self, pg, what, device, p2p=False, sync=False):
        seen.append((what, sync))
        orig(self, pg, what, device, p2p, sync)
    bw._Launch.__init__ = spy
    try:
        t = dev(torch.ones(3))
        dist.all_reduce(t)
        dist.all_reduce(t, async_op=True).wait()
        dist.broadcast(t, 0)
    finally:
        bw._Launch.__init__ = orig
    want = [("allreduce", True), ("allreduce", False), ("broadcast", True)]
    checks += 1
    if seen != want:
        fail("sync form: the launches were %s, expected %s" % (seen, want))
    same("sync form: the all-reduces' result", t, torch.full((3,), float(P * P)))


def case_errors():
    expect_error("BAND on int32", lambda: dist.all_reduce(dev(torch.ones(4, dtype=torch.int32)),
                                                          op=dist.ReduceOp.BAND), "BAND", "int32")
    expect_error("AVG on bool", lambda: dist.all_reduce(dev(torch.ones(4, dtype=torch.bool)), op=dist.ReduceOp.AVG),
                 "AVG", "bool")
    expect_error("int16 reduction", lambda: dist.all_reduce(dev(torch.ones(4, dtype=torch.int16))), "int16")
    # torch 2.x refuses it itself, before the group is called (ValueError)
    expect_error("PRODUCT on complex", lambda: dist.all_reduce(dev(torch.ones(4, dtype=torch.complex64)),
                                                               op=dist.ReduceOp.PRODUCT), "complex",
                 kinds=(RuntimeError, ValueError))
    if hasattr(torch._C._distributed_c10d, "_make_nccl_premul_sum"):
        expect_error("PREMUL_SUM", lambda: dist.all_reduce(
            dev(torch.ones(4)), op=torch._C._distributed_c10d._make_nccl_premul_sum(2.0)), "PREMUL_SUM")
    expect_error("recv without src", lambda: dist.recv(dev(torch.ones(4))), "src")
    expect_error("send with a tag", lambda: dist.send(dev(torch.ones(4)), (R + 1) % P, tag=7), "tag")
    expect_error("sparse", lambda: dist.all_reduce(torch.ones(4).to_sparse()), "sparse")
    if P > 1:  # split along dim 0, as Gloo and NCCL require: P + 1 rows do not split among P ranks
        expect_error("all_to_all_single, rows not divisible", lambda: dist.all_to_all_single(
            dev(torch.empty(P + 1, P)), dev(torch.ones(P + 1, P))), "dim 0")
    # the group still works after those (local) errors
    t = dev(torch.ones(2))
    dist.all_reduce(t)
    same("allreduce after the errors", t, torch.full((2,), float(P)))


t_start = time.monotonic()
for fn in (case_allreduce, case_allreduce_noncontig, case_param_noncontig, case_barrier_after_future, case_coalesced, case_broadcast_reduce, case_allgather,
           case_coalesced_fast, case_reduce_scatter, case_reduce_scatter_apart, case_alltoall, case_first_exchange, case_gather_scatter,
           case_p2p_barrier, case_future_callbacks,
           case_objects, case_subgroup, case_sync_form, case_torch2_api, case_outputs_let_go, case_errors):
    t0 = time.monotonic()
    raised = 0
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        fail("%s raised %s: %s" % (fn.__name__, type(e).__name__, e))
        raised = 1
    # the ranks agree (over Gloo) whether to go on: where every rank raised and the group's
    # communicators still work, they are in step and the next case can run; where only some
    # raised (the others may have waited in calls no peer made, until the deadline), or a
    # communicator failed, all stop
    # (a group of their own: a rank that raised alone meets no other call there; FLAGS waits
    # longer than one case's deadline, which a peer may spend in a call this rank left)
    broken = int(dist.group.WORLD._core._async_error("check") is not None)
    flag = torch.tensor([raised, broken])
    try:
        dist.all_reduce(flag, group=FLAGS)
    except RuntimeError as e:
        fail("deciding whether to go on after %s: %s" % (fn.__name__, e))
        break
    if int(flag[1]) or 0 < int(flag[0]) < P:
        note("%s raised on %d of %d ranks, the group failed on %d: stopping"
             % (fn.__name__, int(flag[0]), P, int(flag[1])))
        break
    if R == 0 and os.environ.get("BACKEND_OPS_VERBOSE"):
        note("%s: %.1f s" % (fn.__name__, time.monotonic() - t0))
note("%d checks, %d failed (%.1f s, device %s)" % (checks, failed, time.monotonic() - t_start, DEV))
dist.destroy_process_group()
sys.exit(1 if failed else 0)

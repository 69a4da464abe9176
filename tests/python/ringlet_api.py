"""The Python binding's collectives on torch tensors and numpy arrays.

all_reduce (every op; float32, float64, bfloat16, int64, bool: sum/max "or", prod/min "and"; out of place
too), broadcast from every root, reduce, all_gather (flat and list forms), reduce_scatter,
barrier, a send/recv ring, non-blocking forms (Work.wait / is_completed; all_gather into a
list returns a Work already complete; one Work polled by a thread while another waits for it), and the errors: a non-CPU tensor (RingletError,
invalid usage), a non-contiguous one (ValueError), an unknown op, a numpy array of the other
byte order, all_gather outputs of the wrong size, a root rank past 32 bits or negative (ValueError) or not an integer
(TypeError), torch.distributed.ReduceOp values (every op; BXOR refused), the DDP's bucket_cap_mb (None the default;
0, -1, nan refused) and its keyword-only arguments, a DDP's complex64 and int16 buffers and frozen complex128
parameter (as bytes: rank 0's at construction and before a forward), a Work waited for after its communicator's
destroy (RingletError, invalid usage: its request went with the communicator), a Work dropped unfinished
(its finalizer does not wait; the receive lands), and a destroy while another thread's receive is inside
the communicator (the destroy waits for it; the receive gets its data). Prints "ringlet_api: rank R: N checks, F failed".
"""
import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_common import skip_unless_torch  # noqa: E402

skip_unless_torch()
import numpy as np  # noqa: E402
import torch  # noqa: E402

import ringlet  # noqa: E402

checks = [0, 0]


def check(cond, what):
    checks[0] += 1
    if not cond:
        checks[1] += 1
        print("FAIL rank %d: %s" % (ringlet.get_rank(), what), flush=True)


def main():
    comm = ringlet.init_from_env()
    r, w = ringlet.get_rank(), ringlet.get_world_size()
    check(comm.rank == int(os.environ["RANK"]) and comm.size == int(os.environ["WORLD_SIZE"]), "rank/size")
    vals = [float(k + 1) for k in range(w)]

    def small(rank, n=37):
        # rank's input: integers 1..7 that differ per element (an element taken from the
        # wrong place, or the wrong rank, shows); every sum, max, min exact in bfloat16 too
        return [float((rank * 131 + i * 29 + (i * i) % 11) % 7 + 1) for i in range(n)]

    ins = [small(k) for k in range(w)]
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int64):
        eps = torch.finfo(dtype).eps if dtype.is_floating_point else 0
        for op in ("sum", "max", "min", "avg", "prod"):
            cols = list(zip(*ins))
            ref = {"sum": [sum(c) for c in cols], "max": [max(c) for c in cols], "min": [min(c) for c in cols],
                   "prod": [float(np.prod(c)) for c in cols]}.get(op)
            if op == "avg":  # integers: truncated toward zero, as the sum's division does
                ref = [sum(c) / w if dtype.is_floating_point else float(int(sum(c)) // w) for c in cols]
            t = torch.tensor(ins[r], dtype=torch.float64).to(dtype)
            ringlet.all_reduce(t, op=op)
            exp = torch.tensor(ref, dtype=torch.float64).to(dtype)
            # exact but for avg's division (2 ulps) and bfloat16's products of more than
            # two factors (each partial product rounded to 8 bits)
            rtol = 2 * eps if op == "avg" else 2 ** -7 if (dtype == torch.bfloat16 and op == "prod") else 0
            same = torch.equal(t, exp) if rtol == 0 else torch.allclose(t.double(), exp.double(), rtol=rtol, atol=0)
            check(same, "all_reduce %s %s: %s, want %s" % (dtype, op, t.tolist(), exp.tolist()))
    b = torch.tensor([r % 2 == 0, True, False])
    ringlet.all_reduce(b, op="max")
    check(b.tolist() == [True, True, False], "bool all_reduce %s" % b)
    # bool sum is "or", prod "and": bytes 0/1, never a byte 2 (the default op is sum)
    b = torch.tensor([r == 0, True, False, True])
    ringlet.all_reduce(b)
    check(b.view(torch.uint8).tolist() == [1, 1, 0, 1], "bool all_reduce sum: %s" % b.view(torch.uint8).tolist())
    b = torch.tensor([r == 0, True, False, True])
    ringlet.all_reduce(b, op="prod")
    want = [int(w == 1), 1, 0, 1]
    check(b.view(torch.uint8).tolist() == want, "bool all_reduce prod: %s" % b.view(torch.uint8).tolist())
    nb = np.array([r == 0, True, False])
    comm.all_reduce(nb)
    check(nb.view(np.uint8).tolist() == [1, 1, 0], "numpy bool all_reduce sum: %s" % nb.view(np.uint8).tolist())
    a = np.array(ins[r][:7], dtype=np.float32)
    out = np.zeros(7, dtype=np.float32)
    comm.all_reduce(a, output=out)
    check(out.tolist() == [sum(c) for c in list(zip(*ins))[:7]] and a.tolist() == ins[r][:7],
          "numpy out-of-place all_reduce %s" % out)
    for root in range(w):
        t = torch.arange(6, dtype=torch.float32) + (100 * r)
        ringlet.broadcast(t, src=root)
        check(torch.equal(t, torch.arange(6, dtype=torch.float32) + 100 * root), "broadcast from %d" % root)
    t = torch.tensor([r + 1.0, 2.0 * r, 5.0 - r])
    ringlet.reduce(t, dst=w - 1)
    if r == w - 1:
        check(t.tolist() == [sum(vals), float(w * (w - 1)), 5.0 * w - w * (w - 1) / 2], "reduce %s" % t)
    flat = torch.zeros(2 * w)
    ringlet.all_gather(flat, torch.tensor([r, -r], dtype=torch.float32))
    check(flat.tolist() == [float(v) for k in range(w) for v in (k, -k)], "all_gather flat %s" % flat)
    lst = [torch.zeros(2, dtype=torch.int64) for _ in range(w)]
    ringlet.all_gather(lst, torch.tensor([r, r * r]))
    check([x.tolist() for x in lst] == [[k, k * k] for k in range(w)], "all_gather list")
    src = torch.arange(3 * w, dtype=torch.float64) * (r + 1)  # rank r's input: its own multiple
    dst = torch.zeros(3, dtype=torch.float64)
    ringlet.reduce_scatter(dst, src)
    check(torch.equal(dst, torch.arange(3 * r, 3 * r + 3, dtype=torch.float64) * (w * (w + 1) // 2)),
          "reduce_scatter %s" % dst)
    ringlet.barrier()
    if w > 1:
        s = torch.full((4,), float(r))
        q = torch.zeros(4)
        wk = ringlet.send(s, (r + 1) % w, async_op=True) if r % 2 == 0 else None
        ringlet.recv(q, (r - 1) % w)
        if wk is None:
            ringlet.send(s, (r + 1) % w)
        else:
            wk.wait()
        check(torch.all(q == float((r - 1) % w)).item(), "send/recv ring %s" % q)
    if w > 1 and r < 2:
        # wait(timeout): rank 1 sends only once rank 0's timed wait has run out (rank 0 then
        # sends it a token), so the timeout is reached by construction; the receive goes on
        # and a plain wait completes it.
        if r == 0:
            q = torch.zeros(5, dtype=torch.int64)
            wk = ringlet.recv(q, 1, async_op=True)
            try:
                wk.wait(timeout=0.05)
                check(False, "wait(timeout) returned with the sender not yet sending")
            except ringlet.RingletError as e:
                check(e.code == ringlet.ERR_TIMEOUT and "timed out" in str(e), "wait(timeout): %s" % e)
            check(not wk.is_completed(), "the receive completed before its sender sent")
            ringlet.send(torch.tensor([7]), 1)
            check(wk.wait(timeout=datetime.timedelta(seconds=120)) and q.tolist() == [3, 1, 4, 1, 5],
                  "receive after a timed-out wait: %s" % q)
        else:
            token = torch.zeros(1, dtype=torch.int64)
            ringlet.recv(token, 0)
            check(token.item() == 7, "token %s" % token)
            ringlet.send(torch.tensor([3, 1, 4, 1, 5]), 0)
    works = []
    ts = [torch.full((1000,), float(k + r)) for k in range(4)]
    for t in ts:
        works.append(ringlet.all_reduce(t, async_op=True))
    for k, wk in enumerate(works):
        wk.wait()
        check(wk.is_completed(), "is_completed after wait")
        check(torch.all(ts[k] == float(k * w + sum(range(w)))).item(), "async all_reduce %d" % k)

    try:
        ringlet.all_reduce(torch.empty(3, device="meta"))
        check(False, "a meta tensor was accepted")
    except ringlet.RingletError as e:
        check(e.code == ringlet.ERR_INVALID_USAGE and "CPU and CUDA tensors" in str(e), "meta tensor error: %s" % e)
    try:
        ringlet.all_reduce(torch.zeros(4, 4).t())
        check(False, "a non-contiguous tensor was accepted")
    except ValueError as e:
        check("contiguous" in str(e), "non-contiguous error: %s" % e)
    # a rank past 32 bits (ctypes would wrap 2**32 into rank 0), and a negative one
    for bad in (2 ** 32, -1):
        try:
            ringlet.broadcast(torch.zeros(4), src=bad)
            check(False, "broadcast from rank %d was accepted" % bad)
        except ValueError as e:
            check("rank %d is not a rank" % bad in str(e), "broadcast src=%d error: %s" % (bad, e))
    try:
        ringlet.all_reduce(torch.zeros(4), op="xor")
        check(False, "op xor accepted")
    except ValueError:
        check(True, "")
    try:
        ringlet.broadcast(torch.zeros(4), src=0.7)
        check(False, "broadcast from rank 0.7 was accepted (as rank 0)")
    except TypeError as e:
        check("must be an integer" in str(e), "broadcast src=0.7 error: %s" % e)
    # torch.distributed.ReduceOp values (on torch 1.13 their str() names no op)
    import torch.distributed as dist
    for name, want in (("SUM", sum(vals)), ("PRODUCT", float(np.prod(vals))), ("MIN", 1.0), ("MAX", float(w)),
                       ("AVG", sum(vals) / w)):
        t = torch.full((5,), float(r + 1))
        try:
            ringlet.all_reduce(t, op=getattr(dist.ReduceOp, name))
            check(torch.allclose(t, torch.full((5,), want)), "all_reduce op=ReduceOp.%s: %s, want %s" % (name, t, want))
        except ValueError as e:
            check(False, "all_reduce op=ReduceOp.%s refused: %s" % (name, e))
    try:
        ringlet.all_reduce(torch.zeros(4), op=dist.ReduceOp.BXOR)
        check(False, "op ReduceOp.BXOR accepted on a float tensor")
    except ValueError as e:
        check("unknown reduction op" in str(e), "ReduceOp.BXOR error: %s" % e)
    # the DDP's bucket caps: None is the default (torch's DDP passes None so); <= 0 refused, and caps past a size_t
    from ringlet.torch import DistributedDataParallel as RDDP
    d = RDDP(torch.nn.Linear(3, 2), bucket_cap_mb=None, first_bucket_cap_mb=None)
    check(isinstance(d, RDDP), "DDP with bucket_cap_mb=None")
    for bad in (0, -1, float("nan"), 2 ** 44 + 0.5):  # the last: more bytes than a size_t
        try:
            RDDP(torch.nn.Linear(3, 2), bucket_cap_mb=bad)
            check(False, "DDP with bucket_cap_mb=%r accepted" % bad)
        except ValueError as e:
            check("bucket_cap_mb" in str(e), "bucket_cap_mb=%r error: %s" % (bad, e))
    # buffers and frozen parameters of dtypes ringlet has no arithmetic for go as bytes:
    # rank 0's at construction (and before each forward), as torch's DDP makes them
    class Odd(torch.nn.Module):
        def __init__(self, seed):
            super().__init__()
            g = torch.Generator().manual_seed(seed)
            self.lin = torch.nn.Linear(3, 2)
            self.register_buffer("freqs", torch.randn(5, 2, generator=g, dtype=torch.complex64))
            self.register_buffer("steps", torch.randint(-30000, 30000, (7,), generator=g, dtype=torch.int16))
            self.rot = torch.nn.Parameter(torch.randn(4, generator=g, dtype=torch.complex128), requires_grad=False)

        def forward(self, x):
            return self.lin(x)
    ref = Odd(1000)
    d = RDDP(Odd(1000 + r))
    check(torch.equal(d.module.freqs, ref.freqs) and torch.equal(d.module.steps, ref.steps)
          and torch.equal(d.module.rot, ref.rot), "complex / int16 buffers and a frozen complex128 parameter: not "
          "rank 0's after construction")
    with torch.no_grad():
        d.module.steps.copy_(torch.full((7,), 100 + r, dtype=torch.int16))
        d.module.freqs.mul_(1 + r)
    d(torch.ones(2, 3)).sum().backward()
    check(torch.equal(d.module.steps, torch.full((7,), 100, dtype=torch.int16))
          and torch.equal(d.module.freqs, ref.freqs), "buffers as bytes: not rank 0's after a forward")
    try:  # torch's order: (module, device_ids, output_device, ...)
        RDDP(torch.nn.Linear(3, 2), None, 0)
        check(False, "DDP(module, None, 0) accepted (0 taken as bucket_cap_mb)")
    except TypeError:
        check(True, "")
    try:
        comm.all_reduce(np.arange(4, dtype=">f4"))
        check(False, "a big-endian numpy array was accepted (its bytes would be summed as native floats)")
    except ValueError as e:
        check("byte order" in str(e), "big-endian array error: %s" % e)
    lst = [torch.zeros(2, dtype=torch.int64) for _ in range(w)]
    wk = ringlet.all_gather(lst, torch.tensor([r, -r]), async_op=True)
    check(wk is not None and wk.wait() and wk.is_completed(), "all_gather list async_op: a Work already complete")
    check([x.tolist() for x in lst] == [[k, -k] for k in range(w)], "all_gather list async_op: %s" % lst)
    try:
        ringlet.all_gather([torch.zeros(1) for _ in range(w)], torch.zeros(2))
        check(False, "all_gather into outputs of 1 element for an input of 2 was accepted")
    except ValueError as e:
        check("output 0 has 1 elements" in str(e), "all_gather output size error: %s" % e)
    # one Work, two threads: one polls is_completed() while the other waits (the C request
    # is freed by whichever completes it; the other must not touch it after)
    import threading
    bad = []
    for k in range(30):
        t = torch.full((1 << 14,), float(r + k))
        wk = ringlet.all_reduce(t, async_op=True)
        stop = threading.Event()

        def poll(wk=wk, stop=stop):
            while not stop.is_set():
                if wk.is_completed():
                    return
        th = threading.Thread(target=poll)
        th.start()
        wk.wait()
        stop.set()
        th.join()
        if not (wk.is_completed() and torch.all(t == sum(q + k for q in range(w)))):
            bad.append(k)
    check(not bad, "a Work polled by one thread and waited for by another: wrong in rounds %s" % bad)
    # out of place, the input is only read: a read-only numpy array is taken
    ro = np.frombuffer(np.arange(4, dtype=np.float32).tobytes(), dtype=np.float32)
    ro_out = np.zeros(4, dtype=np.float32)
    comm.all_reduce(ro, output=ro_out)
    check(ro_out.tolist() == [float(k * w) for k in range(4)], "all_reduce of a read-only array: %s" % ro_out.tolist())
    try:
        ringlet.all_reduce(torch.ones(2), op=True)
        check(False, "op=True accepted (as a product)")
    except ValueError as e:
        check("unknown reduction op" in str(e), "op=True error: %s" % e)
    # a Work dropped unfinished: its finalizer does not wait (an irecv dropped before the
    # send that its sender makes only after its own: every rank waited there, for good); the
    # receive completes at later calls, into the tensor it keeps
    import time
    if w > 1:
        got = torch.zeros(5)
        ringlet.recv(got, (r - 1) % w, async_op=True)  # the Work is dropped at once
        ringlet.send(torch.arange(5, dtype=torch.float32) + 10 * r, (r + 1) % w)
        until = time.monotonic() + 120
        while time.monotonic() < until:  # as many rounds on every rank: until all are done
            left = torch.tensor([len(comm._orphans)], dtype=torch.int64)
            ringlet.all_reduce(left)  # (a call: it tests the dropped requests first)
            if left.item() == 0:
                break
        check(not comm._orphans and got.tolist() == [10.0 * ((r - 1) % w) + k for k in range(5)],
              "a dropped irecv: %s pending, received %s" % (len(comm._orphans), got.tolist()))
    # a Work not waited for when its communicator goes: destroy frees its request
    last = ringlet.all_reduce(torch.ones(3), async_op=True)
    # a destroy while another thread's call is inside the communicator waits for that call
    # (it was freed under it: a crash, or that call failed): rank 0's thread receives from
    # rank 1, which sends only once rank 0's main thread, past the thread's entry, said so
    inside = threading.Event()
    recv_out = []
    if w > 1 and r == 0:
        enter = comm._enter

        def enter_and_say(abort=False):
            h = enter(abort)
            inside.set()
            return h
        comm._enter = enter_and_say
        data = torch.zeros(4, dtype=torch.int64)

        def receiver():
            try:
                ringlet.recv(data, 1)
                recv_out.append(data.tolist())
            except ringlet.RingletError as e:
                recv_out.append(str(e))
        th = threading.Thread(target=receiver)
        th.start()
        inside.wait(120)
        comm._enter = enter
        ringlet.send(torch.ones(1, dtype=torch.int64), 1)
    elif w > 1 and r == 1:
        token = torch.zeros(1, dtype=torch.int64)
        ringlet.recv(token, 0)
        ringlet.send(torch.tensor([3, 1, 4, 1], dtype=torch.int64) * 7, 0)
    ringlet.destroy()
    if w > 1 and r == 0:
        th.join()
        check(recv_out == [[21, 7, 28, 7]], "a receive of another thread inside the communicator during destroy: %s"
              % recv_out)
    try:
        last.wait()
        check(False, "wait on a Work whose communicator was destroyed succeeded")
    except ringlet.RingletError as e:
        check(e.code == ringlet.ERR_INVALID_USAGE and "destroyed" in str(e), "wait after destroy: %s" % e)
    check(last.is_completed(), "is_completed after destroy")
    print("ringlet_api: rank %d: %d checks, %d failed" % (r, checks[0], checks[1]), flush=True)
    return 1 if checks[1] else 0


if __name__ == "__main__":
    sys.exit(main())

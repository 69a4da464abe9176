"""The torch.distributed backend "ringlet": torch's own collectives, DistributedDataParallel,
ZeroRedundancyOptimizer and new_group on ringlet.

    import torch.distributed as dist
    import ringlet.torch                        # registers the backend "ringlet"
    dist.init_process_group("ringlet")          # env:// (torchrun, ringlet-run), or store=..., init_method=...
    model = torch.nn.parallel.DistributedDataParallel(model)

How it is built (torch 1.13 and 2.x alike): ProcessGroupRinglet is a Python subclass of
torch's ProcessGroup; torch's C++ code (DDP's reducer, _broadcast_coalesced, the
parameter check) calls its methods through torch's pybind trampoline. Each method checks
its tensors, issues ringlet's non-blocking call (CPU tensors) or its stream-ordered call
(CUDA tensors) and returns a Work (a Python subclass of torch's Work).

Rendezvous: the creator gets torch's store (a PrefixStore per group): the group's rank 0
makes ringlet unique ids and puts them there, the others read them, and every rank calls
ringlet_comm_init_rank_config with torch's timeout as the communicators' deadline. No
port of ringlet's own is configured. A group has two communicators: one for its
collectives, one for send and recv. ringlet matches the messages between two ranks in the
order they were sent, so a receive still pending when a collective starts would otherwise
take the collective's first message from that peer (Gloo keeps them apart with tags). new_group makes its communicator the same way: torch
calls a backend's creator on the group's members only, so ringlet_comm_split (collective
over the parent) cannot be used, but split does exactly this (leader's unique id, then
init_rank) with the id handed out over the parent instead of the store.

Work on CPU tensors (as Gloo's): wait() blocks until done (raising RuntimeError on
failure, naming the operation, the group and what ringlet says of the failed rank);
is_completed() tests without blocking; get_future() returns a torch.futures.Future
completed when the operation is. Futures are completed by one thread per process group
(started at the first get_future), which waits for the operations whose futures were
asked for, oldest first, in ringlet_wait (the GIL released); there is no thread per call.
An operation nobody asked a future of is completed by whoever waits or tests it.

Work on CUDA tensors (as NCCL's): the call is queued on a stream of the group's (per
device, one for collectives and one for send/recv) that first waits for torch's current stream; wait() makes the then current
stream wait for it (the host does not wait); get_future()'s future is complete at once
and makes the streams of its consumers wait; is_completed() says whether the GPU has
finished it. Tensors are kept (record_stream) until the stream is done with them.

Keeping Works alive: torch's C++ code may hold a Work after Python dropped it, and calls
its wait() through the trampoline, which only reaches Python while the Python object
lives. So the group keeps every Work until its completion has been seen through wait(),
get_future() or is_completed() (and the last 32 seen a while longer); a Work nobody ever
waits for is completed by the group at a later call and kept among the last 4096 such.
"""
import collections
import ctypes
import datetime
import os
import sys
import threading
import time
import weakref

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as _c10d

from . import _lib, RingletError

__all__ = ["ProcessGroupRinglet", "register", "BACKEND"]

BACKEND = "ringlet"
_L = _lib.lib
_ProcessGroup = _c10d.ProcessGroup
_TorchWork = _c10d.Work
ReduceOp = _c10d.ReduceOp

# ---- dtypes and ops ----

_DT = {torch.int8: _lib.INT8, torch.uint8: _lib.UINT8, torch.int32: _lib.INT32, torch.int64: _lib.INT64,
       torch.float16: _lib.FLOAT16, torch.bfloat16: _lib.BFLOAT16, torch.float32: _lib.FLOAT32,
       torch.float64: _lib.FLOAT64}
for _name, _code in (("uint32", _lib.UINT32), ("uint64", _lib.UINT64)):  # torch 2.x
    if isinstance(getattr(torch, _name, None), torch.dtype):
        _DT[getattr(torch, _name)] = _code
_REDUCIBLE = "int8, uint8, int32, int64, float16, bfloat16, float32, float64 (uint32, uint64 where torch has them)"

_OPNAMES = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM")
_OPVALUES = [(n, getattr(ReduceOp, n)) for n in _OPNAMES if hasattr(ReduceOp, n)]
_RINGLET_OP = {"SUM": _lib.SUM, "AVG": _lib.AVG, "PRODUCT": _lib.PROD, "MIN": _lib.MIN, "MAX": _lib.MAX}
# bool tensors reduce as uint8 0/1: or, and, parity
_BOOL_OP = {"SUM": _lib.MAX, "MAX": _lib.MAX, "BOR": _lib.MAX, "PRODUCT": _lib.MIN, "MIN": _lib.MIN,
            "BAND": _lib.MIN, "BXOR": _lib.SUM}


def _op_name(op):
    for name, value in _OPVALUES:
        try:
            if op == value:
                return name
        except TypeError:
            pass
    return str(op)


class _Reduction:
    """How a reduction runs on tensor t: the contiguous buffer ringlet reduces (a view of t
    or a staging copy), its ringlet dtype and op, and what to do once it is done."""

    __slots__ = ("buf", "code", "op", "fix", "staged")

    def __init__(self, t, opname, what):
        self.fix = None
        if t.layout != torch.strided:
            raise RuntimeError("ringlet: %s: a %s tensor; only dense (strided) tensors are supported" % (what, t.layout))
        buf = self.staged = t if t.is_contiguous() else t.contiguous()  # a copy: written back when done
        if t.is_complex():
            if opname not in ("SUM", "AVG"):
                raise RuntimeError("ringlet: %s: ReduceOp.%s is not defined for complex tensors (SUM and AVG are: they "
                                   "reduce the real and imaginary parts)" % (what, opname))
            buf = torch.view_as_real(buf)
        elif t.dtype == torch.bool:
            if opname not in _BOOL_OP:
                raise RuntimeError("ringlet: %s: ReduceOp.%s is not defined for bool tensors (SUM/MAX/BOR = or, "
                                   "PRODUCT/MIN/BAND = and, BXOR = parity)" % (what, opname))
            buf = buf.view(torch.uint8)
            self.code, self.op, self.buf = _lib.UINT8, _BOOL_OP[opname], buf
            if opname == "BXOR":
                self.fix = buf  # the sum's low bit
            return
        code = _DT.get(buf.dtype)
        if code is None:
            raise RuntimeError("ringlet: %s: ringlet cannot reduce %s tensors (it reduces %s; bool and complex are "
                               "converted); collectives that only move data take every dtype"
                               % (what, t.dtype, _REDUCIBLE))
        if opname not in _RINGLET_OP:
            if opname in ("BAND", "BOR", "BXOR"):
                raise RuntimeError("ringlet: %s: ReduceOp.%s on %s tensors is not supported: ringlet reduces with SUM, "
                                   "PRODUCT, MIN, MAX and AVG (bitwise ops only on bool tensors)" % (what, opname, t.dtype))
            raise RuntimeError("ringlet: %s: ReduceOp %s is not supported (SUM, PRODUCT, MIN, MAX, AVG; BAND, BOR, "
                               "BXOR on bool tensors)" % (what, opname))
        self.code, self.op, self.buf = code, _RINGLET_OP[opname], buf

    def finish(self):
        if self.fix is not None:
            self.fix.bitwise_and_(1)


def _check_dense(t, what):
    if not isinstance(t, torch.Tensor):
        raise TypeError("ringlet: %s: expected a torch.Tensor, got %s" % (what, type(t).__name__))
    if t.layout != torch.strided:
        raise RuntimeError("ringlet: %s: a %s tensor; only dense (strided) tensors are supported" % (what, t.layout))


def _nbytes(t):
    return t.numel() * t.element_size()


def _contig(t):
    return t if t.is_contiguous() else t.contiguous()


def _adjacent(tensors, nbytes):
    """The tensors lie one after the other, contiguous, nbytes each: one buffer."""
    if not tensors:
        return False
    base = tensors[0].data_ptr()
    for i, t in enumerate(tensors):
        if not t.is_contiguous() or _nbytes(t) != nbytes or t.data_ptr() != base + i * nbytes:
            return False
    return True


def _bytes(t):
    """A contiguous 1-D uint8 view of t's elements (a copy if t is not contiguous)."""
    t = _contig(t).reshape(-1)
    if t.is_complex():
        t = torch.view_as_real(t).reshape(-1)
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)


def _as_like(b, like):
    """The uint8 buffer b seen as a tensor shaped and typed like `like`."""
    if like.is_complex():
        real = torch.view_as_real(torch.empty(0, dtype=like.dtype)).dtype
        return torch.view_as_complex(b.view(real).reshape(-1, 2)).reshape(like.shape)
    return (b if like.dtype == torch.uint8 else b.view(like.dtype)).reshape(like.shape)


def _ptr(t):
    return t.data_ptr() if t.numel() else None


# ---- Work ----

class _Failed:
    """A failed operation's value in its base future (see _future)."""

    __slots__ = ("err",)

    def __init__(self, err):
        self.err = err


def _unwrap(fut):
    v = fut.value()
    if isinstance(v, _Failed):
        raise v.err
    return v


def _future():
    """(base, user): the future to complete and the one to hand out. torch 1.13's
    Future.set_exception stores the exception as the future's value, which torch's C++ code
    (DDP's reducer) takes for a result and crashes on; an exception raised by a then()
    callback becomes a real error of the future, which C++ and Python both raise."""
    base = torch.futures.Future()
    return base, base.then(_unwrap)

class _CpuWork(_TorchWork):
    """An operation on CPU tensors: its ringlet requests, what to do once they are done
    (copies out of staging buffers), and the tensors to keep and to return."""

    def __init__(self, pg, what, reqs, finish, outputs, keep, ci=0):
        super().__init__()
        self._pg = pg
        self._ci = ci  # the group's communicator it runs on (0 collectives, 1 sends and receives)
        self._what = what
        self._reqs = reqs
        self._finishers = finish
        self._outputs = outputs
        self._keep = keep
        self._state = 0  # 0 running, 1 done, 2 failed
        self._rc, self._msg = 0, None  # the first request that failed
        self._err = None
        self._owner = False  # someone is in ringlet_wait/test on the requests
        self._lock = threading.Lock()
        self._fut = None  # the future to complete, and
        self._user_fut = None  # the one get_future hands out (see _future)
        self._done_ev = None
        self._seen = False  # its completion was reported to the caller

    # -- completion --

    def _run_requests(self, block):
        """Waits for (block) or tests the requests; the caller owns them. True once all are done."""
        reqs = self._reqs
        if not self._pg._handle:
            self._complete(_lib.ERR_INVALID_USAGE, "the process group was destroyed before the operation completed")
            return True
        for r in reqs:
            if not r:  # done (test/wait freed it)
                continue
            if block:
                rc2 = _L.ringlet_wait(ctypes.byref(r))
            else:
                done = ctypes.c_int(0)
                rc2 = _L.ringlet_test(ctypes.byref(r), ctypes.byref(done))
                if not done.value and not rc2:
                    return False
            if rc2 and not self._rc:  # the first failure, kept across tests
                self._rc, self._msg = rc2, self._pg._last_error(self._ci)
        rc, msg = self._rc, self._msg
        if rc:
            # the others must be done too before their buffers are let go
            for r in reqs:
                if r:
                    _L.ringlet_wait(ctypes.byref(r))
            self._complete(rc, msg)
        else:
            self._complete(0, None)
        return True

    def _complete(self, rc, msg):
        err = None
        if not rc:
            try:
                for f in self._finishers:
                    f()
            except Exception as e:  # a copy out of a staging buffer
                err = RuntimeError("ringlet: %s: after the operation: %s" % (self._what, e))
        else:
            err = self._pg._make_error(rc, self._what, msg)
        with self._lock:
            self._state = 2 if err is not None else 1
            self._err = err
            self._keep = None
            self._finishers = ()
            self._owner = False
            fut, ev = self._fut, self._done_ev
        if fut is not None:
            fut.set_result(self._outputs if err is None else _Failed(err))
        if ev is not None:
            ev.set()

    def _take(self):
        """Ownership of the requests, or an event to wait on while another thread has it."""
        with self._lock:
            if self._state:
                return False, None
            if not self._owner:
                self._owner = True
                return True, None
            if self._done_ev is None:
                self._done_ev = threading.Event()
            return False, self._done_ev

    def _seen_done(self):
        if not self._seen:
            self._seen = True
            self._pg._retire(self)

    # -- torch's Work interface --

    def wait(self, timeout=None):
        """Blocks until done (within the group's deadline); with a timeout (a timedelta or
        seconds, > 0), raises RuntimeError once it has passed, as Gloo's wait does, and the
        operation goes on."""
        limit = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else (timeout or 0)
        if not self._state and limit > 0:
            until = time.monotonic() + limit
            nap = 1e-5
            while not self.is_completed():
                if time.monotonic() >= until:
                    raise RuntimeError("ringlet: %s: wait timed out after %g s (the operation goes on)"
                                       % (self._what, limit))
                time.sleep(nap)
                nap = min(nap * 2, 1e-3)
        if not self._state:
            mine, ev = self._take()
            if mine:
                self._run_requests(True)
            elif ev is not None:
                ev.wait()  # the owner's ringlet_wait returns within ringlet's deadline
        self._seen_done()
        if self._state == 2:
            raise self._err
        return True

    def is_completed(self):
        if not self._state:
            mine, _ = self._take()
            if mine and not self._run_requests(False):
                with self._lock:
                    self._owner = False
                return False
            if not self._state:
                return False
        self._seen_done()
        return True

    def is_success(self):
        return self.is_completed() and self._state == 1

    def exception(self):
        return self._err

    def get_future(self):
        with self._lock:
            new = self._fut is None
            if new:
                self._fut, self._user_fut = _future()
            state = self._state
            hand = new and not state and not self._owner
            if hand:
                self._owner = True  # the completion thread's now
            fut = self._fut
        if new and state == 1:
            fut.set_result(self._outputs)
        elif new and state == 2:
            fut.set_result(_Failed(self._err))
        elif hand:
            self._pg._completer().add(self)
        self._seen_done()
        return self._user_fut

    def result(self):
        self.wait()
        return list(self._outputs)

    def source_rank(self):
        raise RuntimeError("ringlet: source_rank(): ringlet does not receive from any source (recv needs src)")

    _source_rank = source_rank

    def synchronize(self):
        pass


class _CudaWork(_TorchWork):
    """An operation on CUDA tensors, queued on the group's stream for the device: an
    event recorded after it is what wait() and the future synchronise with."""

    def __init__(self, pg, what, device, stream, event, outputs):
        super().__init__()
        self._pg = pg
        self._what = what
        self._device = device
        self._event = event
        self._outputs = outputs
        with torch.cuda.stream(stream):  # the future's events: recorded on the group's stream
            self._fut = torch.futures.Future(devices=[device])
            self._fut.set_result(outputs)
        self._seen = False

    def _check(self):
        err = self._pg._async_error(self._what)
        if err is not None:
            raise err

    def _seen_done(self):
        if not self._seen:
            self._seen = True
            self._pg._retire(self)

    def wait(self, timeout=None):
        torch.cuda.current_stream(self._device).wait_event(self._event)
        self._seen_done()
        self._check()
        return True

    def is_completed(self):
        if self._event.query():
            self._seen_done()
            return True
        return self._pg._async_error(self._what) is not None

    def is_success(self):
        return self.is_completed() and self._pg._async_error(self._what) is None

    def exception(self):
        return self._pg._async_error(self._what)

    def get_future(self):
        self._seen_done()
        return self._fut

    def result(self):
        return list(self._outputs)

    def source_rank(self):
        raise RuntimeError("ringlet: source_rank(): ringlet does not receive from any source (recv needs src)")

    _source_rank = source_rank

    def synchronize(self):
        self.wait()


class _Completer:
    """The process group's one completion thread: waits, oldest first, for the operations
    whose futures were asked for, and completes them."""

    def __init__(self, core):
        self._q = collections.deque()
        self._cv = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="ringlet-completion-%s" % core.group_name, daemon=True)
        self._thread.start()

    def add(self, work):
        with self._cv:
            self._q.append(work)
            self._cv.notify()

    def _run(self):
        while True:
            with self._cv:
                while not self._q and not self._stop:
                    self._cv.wait()
                if not self._q:
                    return
                w = self._q.popleft()
            w._run_requests(True)  # ringlet_wait releases the GIL
            del w

    def stop(self, timeout):
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._thread.join(timeout)
        return not self._thread.is_alive()


# ---- launching one operation ----

class _Launch:
    """Collects one operation's ringlet calls: non-blocking on CPU tensors (a request
    each), stream-ordered on CUDA tensors (the group's stream for the device)."""

    __slots__ = ("pg", "what", "device", "stream", "reqs", "finish", "keep", "_ctx", "_group", "ci", "sync")

    def __init__(self, pg, what, device, p2p=False, sync=False):
        self.pg = pg
        self.ci = 1 if p2p else 0
        self.sync = sync  # torch waits at once: the blocking form, on this thread (CPU)
        self.what = what
        self.device = device
        self.reqs = []
        self.finish = []
        self.keep = []
        self._ctx = None
        self._group = False
        self.stream = None
        if device.type == "cuda":
            side = pg._side_stream(device, self.ci)
            side.wait_stream(torch.cuda.current_stream(device))
            self.stream = side
            self._ctx = torch.cuda.stream(side)
            self._ctx.__enter__()
        elif device.type != "cpu":
            raise RuntimeError("ringlet: %s: %s tensors are not supported (CPU and CUDA are)" % (what, device.type))

    def call(self, nb_fn, b_fn, *args):
        h = self.pg._live(self.what, self.ci)
        if self.stream is None and self.sync:
            rc = b_fn(*args, h, None)
            if rc:
                raise self.pg._make_error(rc, self.what, self.pg._last_error(self.ci))
        elif self.stream is None:
            req = _lib.c_req()
            rc = nb_fn(*args, h, None, ctypes.byref(req))
            if rc:
                raise self.pg._make_error(rc, self.what, self.pg._last_error(self.ci))
            self.reqs.append(req)
        else:
            rc = b_fn(*args, h, self.stream.cuda_stream or 1)  # 1: RINGLET_STREAM_DEFAULT
            if rc:
                raise self.pg._make_error(rc, self.what, self.pg._last_error(self.ci))

    def group_start(self):
        if self.stream is not None:  # device p2p: one group (sends and receives at once)
            _L.ringlet_group_start()
            self._group = True

    def group_end(self):
        if self._group:
            self._group = False
            rc = _L.ringlet_group_end()
            if rc:
                raise self.pg._make_error(rc, self.what, self.pg._last_error(self.ci))

    def then(self, fn):
        """fn runs once the operation is done (CPU), or is queued after it (CUDA)."""
        if self.stream is None:
            self.finish.append(fn)
        else:
            fn()

    def work(self, outputs):
        pg = self.pg
        if self.stream is None:
            w = _CpuWork(pg, self.what, self.reqs, self.finish, outputs, self.keep, self.ci)
            if self.sync:  # done already: copies out of staging now, the Work complete
                w._run_requests(True)
        else:
            ev = torch.cuda.Event()
            ev.record(self.stream)
            for t in self.keep:
                if isinstance(t, torch.Tensor) and t.is_cuda:
                    t.record_stream(self.stream)
            self._ctx.__exit__(None, None, None)
            self._ctx = None
            w = _CudaWork(pg, self.what, self.device, self.stream, ev, outputs)
        pg._track(w)
        return w

    def abandon(self, exc):
        """The operation failed part-way: what was issued is waited for, then exc raised."""
        if self._group:
            self._group = False
            _L.ringlet_group_end()
        for r in self.reqs:
            if r:
                _L.ringlet_wait(ctypes.byref(r))
        if self._ctx is not None:
            self._ctx.__exit__(None, None, None)
            self._ctx = None
        raise exc


_C10D_FILE = os.path.join("distributed", "distributed_c10d.py")


def _sync_call():
    """Whether the torch function that called the ProcessGroup method calling this one is
    a collective of torch.distributed with async_op=False: torch then waits for the Work
    at once, so the method runs ringlet's blocking form on this thread (on host memory it
    runs on the caller's thread when nothing is queued: no hand-over to the progress
    thread). Anything else (async_op=True, DDP's reducer, other C++ callers) gets the
    non-blocking form."""
    try:
        f = sys._getframe(2)
    except ValueError:
        return False
    return f.f_code.co_filename.endswith(_C10D_FILE) and f.f_locals.get("async_op") is False


def _device_of(tensors, what):
    dev = None
    for t in tensors:
        _check_dense(t, what)
        if dev is None:
            dev = t.device
        elif t.device != dev:
            raise RuntimeError("ringlet: %s: tensors on %s and %s; one call takes one device" % (what, dev, t.device))
    return dev if dev is not None else torch.device("cpu")


# ---- the process group ----

_live_groups = []  # weak references, in creation order (destroyed in reverse at exit)


class _Core:
    """What a process group's Works and its completion thread share with it: the
    communicator and the bookkeeping. Works hold this, not the group, so that no cycle
    keeps a group alive: its communicator is destroyed when torch lets go of it
    (destroy_process_group), on every rank at the same point of the program."""

    def __init__(self, handles, rank, size, timeout_s, group_name, global_ranks):
        # The group's two communicators, shared with its finalizer: [0] for collectives,
        # [1] for send and recv. ringlet matches the messages between two ranks in the order
        # they were sent, collectives' and point-to-point alike; on their own communicator a
        # receive still pending when a collective starts can never take the collective's
        # data (torch, as Gloo does with tags, keeps the two apart).
        self.holder = list(handles)
        self.completer_box = [None]
        self.rank = rank
        self.size = size
        self.timeout_s = timeout_s
        self.group_name = group_name or "?"
        self.global_ranks = list(global_ranks or [])
        self.tracked = collections.deque()  # Works whose completion nobody has seen yet
        self.seen = collections.deque(maxlen=32)  # and the last ones that were seen
        self.unwaited = collections.deque(maxlen=4096)
        self.sides = {}
        self.mu = threading.Lock()
        self.coalescing = None

    @property
    def _handle(self):
        return self.holder[0]

    def _live(self, what, ci=0):
        h = self.holder[ci]
        if not h:
            raise RuntimeError("ringlet: %s: the process group was destroyed" % what)
        return h

    def _last_error(self, ci=0):
        h = self.holder[ci]
        return _L.ringlet_comm_last_error(h).decode("utf-8", "replace") if h else ""

    def _make_error(self, rc, what, msg):
        where = "group %s, rank %d of %d" % (self.group_name, self.rank, self.size)
        if self.global_ranks:
            where += "; its ranks are global ranks %s" % self.global_ranks
        return RingletError(rc, "ringlet backend: %s (%s) failed: %s" % (what, where, msg or "(no message)"))

    def _async_error(self, what):
        for ci, h in enumerate(self.holder):
            if not h:
                return RuntimeError("ringlet: %s: the process group was destroyed" % what)
            rc = _L.ringlet_comm_get_async_error(h)
            if rc:
                return self._make_error(rc, what, self._last_error(ci))
        return None

    def _completer(self):
        c = self.completer_box[0]
        if c is None:
            with self.mu:
                if self.completer_box[0] is None:
                    self.completer_box[0] = _Completer(self)
                c = self.completer_box[0]
        return c

    def _side_stream(self, device, ci=0):
        """The group's stream on device for its collectives (ci 0) or its sends and
        receives (1), as NCCL's process group has streams of its own for each."""
        s = self.sides.get((device.index, ci))
        if s is None:
            s = self.sides[(device.index, ci)] = torch.cuda.Stream(device)
        return s

    def _track(self, w):
        tr = self.tracked
        tr.append(w)
        # Works never waited for: completed here (their staging freed) once done, and
        # kept a while (torch's C++ code may still wait on one).
        for _ in range(2):
            if not tr:
                break
            old = tr[0]
            if old._seen:
                tr.popleft()
            elif old is not w and isinstance(old, _CpuWork) and old._state == 0 and not old._owner:
                mine, _ = old._take()
                if mine and not old._run_requests(False):
                    with old._lock:
                        old._owner = False
                    break
            elif old is not w and (not isinstance(old, _CpuWork) or old._state):
                tr.popleft()
                self.unwaited.append(old)
            else:
                break

    def _retire(self, w):
        try:
            self.tracked.remove(w)
        except ValueError:
            pass
        self.seen.append(w)


class ProcessGroupRinglet(_ProcessGroup):
    """A torch ProcessGroup over one ringlet communicator."""

    def __init__(self, handles, rank, size, timeout_s, group_name="", global_ranks=None):
        super().__init__(rank, size)
        self._core = core = _Core(handles, rank, size, timeout_s, group_name, global_ranks)
        self._rank = rank
        self._size = size
        self._group_name = core.group_name
        _live_groups.append(weakref.ref(self))
        self._finalizer = weakref.finalize(self, _close_group, core.holder, core.completer_box, timeout_s)

    @property
    def _handle(self):
        return self._core.holder[0]

    # -- identity --

    def getBackendName(self):
        return BACKEND

    def _get_backend_name(self):
        return BACKEND

    def name(self):
        return BACKEND

    def __repr__(self):
        return "ProcessGroupRinglet(group %s, rank %d of %d)" % (self._group_name, self._rank, self._size)

    @property
    def _device_types(self):  # torch 2.x asks a group which devices it serves
        devs = [torch.device("cpu")]
        if torch.version.cuda is not None:
            devs.append(torch.device("cuda"))
        return devs

    # -- life --

    def shutdown(self):
        """Destroys the communicator (ringlet_comm_destroy). It runs by itself when torch
        lets go of the group (destroy_process_group), or at exit, newest group first."""
        self._finalizer()

    _shutdown = shutdown

    def abort(self):
        """Stops every operation at once (ringlet_comm_abort: the peers see this rank as
        failed), then frees the communicator."""
        for h in self._core.holder:
            if h:
                _L.ringlet_comm_abort(h)
        self._finalizer()

    # -- collectives --

    def _one(self, tensors, what):
        if isinstance(tensors, torch.Tensor):
            return tensors
        if len(tensors) != 1:
            raise RuntimeError("ringlet: %s: %d tensors; ringlet takes one tensor per call (one device per process)"
                               % (what, len(tensors)))
        return tensors[0]

    def allreduce(self, tensors, opts=None):
        t = self._one(tensors, "allreduce")
        op = opts.reduceOp if isinstance(opts, (_c10d.AllreduceOptions, _c10d.AllreduceCoalescedOptions)) else opts
        opname = "SUM" if op is None else _op_name(op)
        what = "allreduce"
        dev = _device_of((t,), what)
        red = _Reduction(t, opname, what)
        ln = _Launch(self._core, what, dev, sync=_sync_call())
        try:
            b = red.buf
            p = _ptr(b)
            ln.call(_L.ringlet_iallreduce, _L.ringlet_allreduce, p, p, b.numel(), red.code, red.op)
            if red.fix is not None:
                ln.then(red.finish)
            if red.staged is not t:
                ln.then(lambda: t.copy_(red.staged))
            ln.keep += (t, b, red.staged)
        except BaseException as e:
            ln.abandon(e)
        return ln.work([t])

    def allreduce_coalesced(self, tensors, opts=None):
        what = "allreduce_coalesced"
        tensors = list(tensors)
        if not tensors:
            raise RuntimeError("ringlet: %s: no tensors" % what)
        op = opts.reduceOp if opts is not None and hasattr(opts, "reduceOp") else opts
        opname = "SUM" if op is None else _op_name(op)
        dev = _device_of(tensors, what)
        dtypes = {t.dtype for t in tensors}
        if len(dtypes) != 1:
            raise RuntimeError("ringlet: %s: tensors of several dtypes (%s); all must have one"
                               % (what, ", ".join(sorted(str(d) for d in dtypes))))
        ln = _Launch(self._core, what, dev, sync=_sync_call())
        try:
            flat = torch.cat([t.reshape(-1) for t in tensors])
            red = _Reduction(flat, opname, what)
            p = _ptr(red.buf)
            ln.call(_L.ringlet_iallreduce, _L.ringlet_allreduce, p, p, red.buf.numel(), red.code, red.op)
            if red.fix is not None:
                ln.then(red.finish)

            def out():
                off = 0
                for t in tensors:
                    n = t.numel()
                    t.copy_(flat[off:off + n].view(t.shape))
                    off += n
            ln.then(out)
            ln.keep += tensors + [flat]
        except BaseException as e:
            ln.abandon(e)
        return ln.work(tensors)

    def broadcast(self, tensors, opts=None):
        what = "broadcast"
        t = self._one(tensors, what)
        root = opts if isinstance(opts, int) else (opts.rootRank if opts is not None else 0)
        if opts is not None and not isinstance(opts, int) and opts.rootTensor != 0:
            raise RuntimeError("ringlet: %s: rootTensor %d; ringlet takes one tensor per call" % (what, opts.rootTensor))
        self._check_rank(root, what, "root")
        dev = _device_of((t,), what)
        ln = _Launch(self._core, what, dev, sync=_sync_call())
        try:
            b = _contig(t)
            p = _ptr(b)
            ln.call(_L.ringlet_ibroadcast, _L.ringlet_broadcast, p, p, _nbytes(b), _lib.UINT8, root)
            if b is not t:
                ln.then(lambda: t.copy_(b))
            ln.keep += (t, b)
        except BaseException as e:
            ln.abandon(e)
        return ln.work([t])

    def reduce(self, tensors, opts=None):
        what = "reduce"
        t = self._one(tensors, what)
        root = opts.rootRank if opts is not None else 0
        opname = _op_name(opts.reduceOp) if opts is not None else "SUM"
        if opts is not None and opts.rootTensor != 0:
            raise RuntimeError("ringlet: %s: rootTensor %d; ringlet takes one tensor per call" % (what, opts.rootTensor))
        self._check_rank(root, what, "root")
        dev = _device_of((t,), what)
        red = _Reduction(t, opname, what)
        ln = _Launch(self._core, what, dev, sync=_sync_call())
        try:
            b = red.buf
            p = _ptr(b)
            ln.call(_L.ringlet_ireduce, _L.ringlet_reduce, p, p, b.numel(), red.code, red.op, root)
            if self._rank == root:
                if red.fix is not None:
                    ln.then(red.finish)
                if red.staged is not t:
                    ln.then(lambda: t.copy_(red.staged))
            ln.keep += (t, b, red.staged)
        except BaseException as e:
            ln.abandon(e)
        return ln.work([t])

    def allgather(self, output_tensors, input_tensors, opts=None):
        what = "allgather"
        inp = self._one(input_tensors, what)
        if len(output_tensors) != 1:
            raise RuntimeError("ringlet: %s: %d output lists; ringlet takes one (one device per process)"
                               % (what, len(output_tensors)))
        outs = list(output_tensors[0])
        self._check_list(outs, inp, what, "output")
        dev = _device_of(outs + [inp], what)
        ln = _Launch(self._core, what, dev, sync=_sync_call())
        try:
            src = _contig(inp)
            nb = _nbytes(src)
            if _adjacent(outs, nb):
                dst = outs[0]
            else:
                dst = torch.empty((self._size,) + tuple(inp.shape), dtype=inp.dtype, device=dev)

                def out():
                    for r, o in enumerate(outs):
                        o.copy_(dst[r])
                ln.then(out)
            ln.call(_L.ringlet_iallgather, _L.ringlet_allgather, _ptr(src), _ptr(dst) if nb else None, nb, _lib.UINT8)
            ln.keep += outs + [inp, src, dst]
        except BaseException as e:
            ln.abandon(e)
        return ln.work(outs)

    def _allgather_base(self, output, input, opts=None):
        what = "_allgather_base (all_gather_into_tensor)"
        _check_dense(output, what)
        _check_dense(input, what)
        if output.dtype != input.dtype or output.numel() != input.numel() * self._size:
            raise RuntimeError("ringlet: %s: output has %d elements of %s, input %d of %s; the output must hold "
                               "%d x the input's elements, of its dtype" % (what, output.numel(), output.dtype,
                                                                           input.numel(), input.dtype, self._size))
        dev = _device_of((output, input), what)
        ln = _Launch(self._core, what, dev, sync=_sync_call())
        try:
            src = _contig(input)
            dst = _contig(output) if output.is_contiguous() else torch.empty(output.shape, dtype=output.dtype,
                                                                              device=dev)
            nb = _nbytes(src)
            ln.call(_L.ringlet_iallgather, _L.ringlet_allgather, _ptr(src), _ptr(dst), nb, _lib.UINT8)
            if dst is not output:
                ln.then(lambda: output.copy_(dst))
            ln.keep += (output, input, src, dst)
        except BaseException as e:
            ln.abandon(e)
        return ln.work([output])

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        what = "allgather_coalesced"
        input_list = list(input_list)
        if len(output_lists) != self._size:
            raise RuntimeError("ringlet: %s: %d output lists for %d ranks" % (what, len(output_lists), self._size))
        for r, lst in enumerate(output_lists):
            if len(lst) != len(input_list):
                raise RuntimeError("ringlet: %s: output list %d has %d tensors, the input list %d"
                                   % (what, r, len(lst), len(input_list)))
            for o, i in zip(lst, input_list):
                if o.dtype != i.dtype or o.numel() != i.numel():
                    raise RuntimeError("ringlet: %s: an output tensor (%s, %d elements) does not match its input "
                                       "(%s, %d)" % (what, o.dtype, o.numel(), i.dtype, i.numel()))
        dev = _device_of(input_list + [o for lst in output_lists for o in lst], what)
        ln = _Launch(self._core, what, dev, sync=_sync_call())
        try:
            src = torch.cat([_bytes(i) for i in input_list]) if input_list else torch.empty(0, dtype=torch.uint8,
                                                                                              device=dev)
            nb = src.numel()
            dst = torch.empty(self._size * nb, dtype=torch.uint8, device=dev)
            ln.call(_L.ringlet_iallgather, _L.ringlet_allgather, _ptr(src), _ptr(dst), nb, _lib.UINT8)

            def out():
                for r, lst in enumerate(output_lists):
                    off = r * nb
                    for o in lst:
                        n = _nbytes(o)
                        o.copy_(_as_like(dst[off:off + n], o))
                        off += n
            ln.then(out)
            ln.keep += [src, dst] + input_list
        except BaseException as e:
            ln.abandon(e)
        return ln.work([o for lst in output_lists for o in lst])

    def _reduce_scatter_into(self, what, out, src, opname, ln):
        """src (contiguous, size x out's elements) reduced and scattered into out."""
        red = _Reduction(src, opname, what)
        stage = out if out.is_contiguous() else torch.empty(out.shape, dtype=out.dtype, device=out.device)
        dred = _Reduction(stage, opname, what)
        dst = dred.buf
        ln.call(_L.ringlet_ireduce_scatter, _L.ringlet_reduce_scatter, _ptr(red.buf), _ptr(dst), dst.numel(),
                red.code, red.op)
        if dred.fix is not None:
            ln.then(dred.finish)
        if stage is not out:
            ln.then(lambda: out.copy_(stage))
        ln.keep += (out, src, red.buf, stage, dst)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        what = "reduce_scatter"
        out = self._one(output_tensors, what)
        if len(input_tensors) != 1:
            raise RuntimeError("ringlet: %s: %d input lists; ringlet takes one" % (what, len(input_tensors)))
        ins = list(input_tensors[0])
        self._check_list(ins, out, what, "input")
        opname = _op_name(opts.reduceOp) if opts is not None else "SUM"
        dev = _device_of(ins + [out], what)
        ln = _Launch(self._core, what, dev, sync=_sync_call())
        try:
            if _adjacent(ins, _nbytes(out)):  # one buffer already (chunks of one tensor)
                src = ins[0].as_strided((self._size * out.numel(),), (1,), ins[0].storage_offset())
            else:
                src = torch.stack([i.reshape(out.shape) for i in ins]).reshape(-1)
            self._reduce_scatter_into(what, out, src, opname, ln)
            ln.keep += ins
        except BaseException as e:
            ln.abandon(e)
        return ln.work([out])

    def _reduce_scatter_base(self, output, input, opts=None):
        what = "_reduce_scatter_base (reduce_scatter_tensor)"
        _check_dense(output, what)
        _check_dense(input, what)
        if output.dtype != input.dtype or input.numel() != output.numel() * self._size:
            raise RuntimeError("ringlet: %s: input has %d elements of %s, output %d of %s; the input must hold "
                               "%d x the output's elements, of its dtype" % (what, input.numel(), input.dtype,
                                                                            output.numel(), output.dtype, self._size))
        opname = _op_name(opts.reduceOp) if opts is not None else "SUM"
        dev = _device_of((output, input), what)
        ln = _Launch(self._core, what, dev, sync=_sync_call())
        try:
            self._reduce_scatter_into(what, output, _contig(input).reshape(-1), opname, ln)
        except BaseException as e:
            ln.abandon(e)
        return ln.work([output])

    def alltoall_base(self, output, input, output_split_sizes=None, input_split_sizes=None, opts=None):
        what = "alltoall_base (all_to_all_single)"
        _check_dense(output, what)
        _check_dense(input, what)
        if output.dtype != input.dtype:
            raise RuntimeError("ringlet: %s: output is %s, input %s" % (what, output.dtype, input.dtype))
        P = self._size
        dev = _device_of((output, input), what)
        even = not output_split_sizes and not input_split_sizes
        ln = _Launch(self._core, what, dev, sync=_sync_call())
        try:
            src = _contig(input)
            dst = output if output.is_contiguous() else torch.empty(output.shape, dtype=output.dtype, device=dev)
            if even:
                if input.numel() % P or output.numel() != input.numel():
                    raise RuntimeError("ringlet: %s: without split sizes, input (%d elements) and output (%d) must "
                                       "hold the same number of elements, divisible by %d ranks"
                                       % (what, input.numel(), output.numel(), P))
                nb = _nbytes(src) // P
                ln.call(_L.ringlet_ialltoall, _L.ringlet_alltoall, _ptr(src), _ptr(dst), nb, _lib.UINT8)
            else:
                ins = self._splits(src, input_split_sizes, what, "input")
                outs = self._splits(dst, output_split_sizes, what, "output")
                self._exchange(ln, ins, outs)
            if dst is not output:
                ln.then(lambda: output.copy_(dst))
            ln.keep += (output, input, src, dst)
        except BaseException as e:
            ln.abandon(e)
        return ln.work([output])

    def alltoall(self, output_tensors, input_tensors, opts=None):
        what = "alltoall (all_to_all)"
        outs, ins = list(output_tensors), list(input_tensors)
        P = self._size
        if len(outs) != P or len(ins) != P:
            raise RuntimeError("ringlet: %s: %d output and %d input tensors for %d ranks" % (what, len(outs), len(ins), P))
        dev = _device_of(outs + ins, what)
        for o, i in zip(outs, ins):
            if o.dtype != ins[0].dtype or i.dtype != ins[0].dtype:
                raise RuntimeError("ringlet: %s: tensors of several dtypes; all must have one" % what)
        ln = _Launch(self._core, what, dev, sync=_sync_call())
        try:
            srcs = [_bytes(i) for i in ins]
            dsts = [o if o.is_contiguous() else torch.empty(o.shape, dtype=o.dtype, device=dev) for o in outs]
            dbytes = [_bytes(d) for d in dsts]
            nb = srcs[0].numel()
            if (all(s.numel() == nb for s in srcs) and all(d.numel() == nb for d in dbytes)
                    and _adjacent(srcs, nb) and _adjacent(dbytes, nb)):
                ln.call(_L.ringlet_ialltoall, _L.ringlet_alltoall, _ptr(srcs[0]), _ptr(dbytes[0]), nb, _lib.UINT8)
            else:
                self._exchange(ln, srcs, dbytes)
            for o, d in zip(outs, dsts):
                if d is not o:
                    ln.then(lambda o=o, d=d: o.copy_(d))
            ln.keep += outs + ins + srcs + dsts + dbytes
        except BaseException as e:
            ln.abandon(e)
        return ln.work(outs)

    def gather(self, output_tensors, input_tensors, opts=None):
        what = "gather"
        inp = self._one(input_tensors, what)
        root = opts.rootRank if opts is not None else 0
        self._check_rank(root, what, "root")
        me = self._rank
        if me == root:
            if len(output_tensors) != 1:
                raise RuntimeError("ringlet: %s: the root needs one output list, got %d" % (what, len(output_tensors)))
            outs = list(output_tensors[0])
            self._check_list(outs, inp, what, "output")
        else:
            if output_tensors and any(len(lst) for lst in output_tensors):
                raise RuntimeError("ringlet: %s: only the root (rank %d) takes output tensors" % (what, root))
            outs = []
        dev = _device_of(outs + [inp], what)
        ln = _Launch(self._core, what, dev, sync=_sync_call())
        try:
            src = _contig(inp)
            nb = _nbytes(src)
            dst = None
            if me == root:
                if _adjacent(outs, nb):
                    dst = outs[0]
                else:
                    dst = torch.empty((self._size,) + tuple(inp.shape), dtype=inp.dtype, device=dev)

                    def out():
                        for r, o in enumerate(outs):
                            o.copy_(dst[r])
                    ln.then(out)
            ln.call(_L.ringlet_igather, _L.ringlet_gather, _ptr(src), _ptr(dst) if dst is not None else None, nb,
                    _lib.UINT8, root)
            ln.keep += outs + [inp, src, dst]
        except BaseException as e:
            ln.abandon(e)
        return ln.work(outs)

    def scatter(self, output_tensors, input_tensors, opts=None):
        what = "scatter"
        out = self._one(output_tensors, what)
        root = opts.rootRank if opts is not None else 0
        self._check_rank(root, what, "root")
        me = self._rank
        if me == root:
            if len(input_tensors) != 1:
                raise RuntimeError("ringlet: %s: the root needs one input list, got %d" % (what, len(input_tensors)))
            ins = list(input_tensors[0])
            self._check_list(ins, out, what, "input")
        else:
            if input_tensors and any(len(lst) for lst in input_tensors):
                raise RuntimeError("ringlet: %s: only the root (rank %d) takes input tensors" % (what, root))
            ins = []
        dev = _device_of(ins + [out], what)
        ln = _Launch(self._core, what, dev, sync=_sync_call())
        try:
            dst = _contig(out) if out.is_contiguous() else torch.empty(out.shape, dtype=out.dtype, device=dev)
            nb = _nbytes(dst)
            src = None
            if me == root:
                src = ins[0] if _adjacent(ins, nb) else torch.stack([i.reshape(out.shape) for i in ins])
            ln.call(_L.ringlet_iscatter, _L.ringlet_scatter, _ptr(src) if src is not None else None, _ptr(dst), nb,
                    _lib.UINT8, root)
            if dst is not out:
                ln.then(lambda: out.copy_(dst))
            ln.keep += ins + [out, src, dst]
        except BaseException as e:
            ln.abandon(e)
        return ln.work([out])

    def barrier(self, opts=None):
        ln = _Launch(self._core, "barrier", torch.device("cpu"), sync=_sync_call())
        try:
            ln.call(_L.ringlet_ibarrier, _L.ringlet_barrier)
        except BaseException as e:
            ln.abandon(e)
        return ln.work([])

    def send(self, tensors, dst_rank, tag=0):
        what = "send"
        t = self._one(tensors, what)
        self._check_peer(dst_rank, tag, what)
        dev = _device_of((t,), what)
        ln = _Launch(self._core, what, dev, p2p=True, sync=_sync_call())
        try:
            b = _contig(t)
            ln.call(_L.ringlet_isend, _L.ringlet_send, _ptr(b), _nbytes(b), _lib.UINT8, dst_rank)
            ln.keep += (t, b)
        except BaseException as e:
            ln.abandon(e)
        return ln.work([t])

    def recv(self, tensors, src_rank, tag=0):
        what = "recv"
        t = self._one(tensors, what)
        self._check_peer(src_rank, tag, what)
        dev = _device_of((t,), what)
        ln = _Launch(self._core, what, dev, p2p=True, sync=_sync_call())
        try:
            b = t if t.is_contiguous() else torch.empty(t.shape, dtype=t.dtype, device=dev)
            ln.call(_L.ringlet_irecv, _L.ringlet_recv, _ptr(b), _nbytes(b), _lib.UINT8, src_rank)
            if b is not t:
                ln.then(lambda: t.copy_(b))
            ln.keep += (t, b)
        except BaseException as e:
            ln.abandon(e)
        return ln.work([t])

    def recv_anysource(self, tensors, tag=0):
        raise RuntimeError("ringlet: recv from any source (dist.recv/irecv without src) is not supported: ringlet "
                           "receives from a named rank; pass src")

    # torch 2.x's batch_isend_irecv on CUDA tensors brackets its sends and receives with
    # these (NCCL-style coalescing): the calls in between go into one ringlet group, which
    # runs them at once (device sends and receives outside a group run one by one, in
    # order, so two ranks that both send first would wait for each other, as with NCCL).
    # Only the Work of _end_coalescing covers them. CPU tensors need no group (host sends
    # and receives are posted and overlap).
    def _start_coalescing(self, device=None):
        dev = torch.device(device) if device is not None else torch.device("cpu")
        if dev.type == "cuda" and self._core.coalescing is None:
            self._core.coalescing = dev
            _L.ringlet_group_start()

    def _end_coalescing(self, device=None):
        dev = self._core.coalescing
        if dev is None:  # nothing was grouped (CPU): nothing to wait for
            return _Launch(self._core, "coalesced operations", torch.device("cpu")).work([])
        self._core.coalescing = None
        ln = _Launch(self._core, "coalesced sends and receives", dev, p2p=True)
        try:
            rc = _L.ringlet_group_end()
            if rc:
                raise self._core._make_error(rc, ln.what, self._core._last_error(1))
        except BaseException as e:
            ln.abandon(e)
        return ln.work([])

    def monitored_barrier(self, opts=None, wait_all_ranks=False):
        raise RuntimeError("ringlet: monitored_barrier is Gloo's; use barrier() (ringlet names a failed or silent rank "
                           "by itself, within the group's timeout)")

    # -- helpers of the collectives --

    def _check_rank(self, r, what, name):
        if not isinstance(r, int) or r < 0 or r >= self._size:
            raise RuntimeError("ringlet: %s: %s %r is out of range [0, %d)" % (what, name, r, self._size))

    def _check_peer(self, peer, tag, what):
        self._check_rank(peer, what, "peer")
        if peer == self._rank:
            raise RuntimeError("ringlet: %s: peer %d is this rank" % (what, peer))
        if tag:
            raise RuntimeError("ringlet: %s: tag %d; ringlet has no tags (messages between two ranks are matched in "
                               "the order they were sent): use tag 0" % (what, tag))

    def _check_list(self, lst, like, what, kind):
        if len(lst) != self._size:
            raise RuntimeError("ringlet: %s: %d %s tensors for %d ranks" % (what, len(lst), kind, self._size))
        for t in lst:
            _check_dense(t, what)
            if t.dtype != like.dtype or t.numel() != like.numel():
                raise RuntimeError("ringlet: %s: an %s tensor has %d elements of %s, expected %d of %s"
                                   % (what, kind, t.numel(), t.dtype, like.numel(), like.dtype))

    def _splits(self, t, sizes, what, kind):
        """Byte views of t's blocks, one per rank, cut along dim 0 by sizes (even if none)."""
        P = self._size
        rows = t.shape[0] if t.dim() else 1
        if not sizes:
            if rows % P:
                raise RuntimeError("ringlet: %s: %s has %d rows, not divisible by %d ranks" % (what, kind, rows, P))
            sizes = [rows // P] * P
        sizes = [int(s) for s in sizes]
        if len(sizes) != P or sum(sizes) != rows or min(sizes) < 0:
            raise RuntimeError("ringlet: %s: %s split sizes %s do not cut %d rows into %d blocks"
                               % (what, kind, sizes, rows, P))
        row = _nbytes(t) // rows if rows else 0
        b = _bytes(t)
        out, off = [], 0
        for s in sizes:
            out.append(b[off:off + s * row])
            off += s * row
        return out

    def _exchange(self, ln, sends, recvs):
        """Block q of sends to rank q, block q of recvs from rank q (byte tensors): sends and
        receives posted at once (host), or one group (device)."""
        me = self._rank
        ln.sync = False  # every send and receive posted at once, whatever torch does next
        if recvs[me].numel() != sends[me].numel():
            raise RuntimeError("ringlet: %s: this rank sends itself %d bytes but expects %d"
                               % (ln.what, sends[me].numel(), recvs[me].numel()))
        if recvs[me].numel():
            recvs[me].copy_(sends[me])
        ln.group_start()
        for q in range(self._size):
            if q != me and recvs[q].numel():
                ln.call(_L.ringlet_irecv, _L.ringlet_recv, _ptr(recvs[q]), recvs[q].numel(), _lib.UINT8, q)
        for q in range(self._size):
            if q != me and sends[q].numel():
                ln.call(_L.ringlet_isend, _L.ringlet_send, _ptr(sends[q]), sends[q].numel(), _lib.UINT8, q)
        ln.group_end()


def _close_group(holder, completer_box, timeout_s):
    """Finalizer of a process group (shutdown(), garbage collection, or exit, newest group
    first): lets the completion thread finish what it holds, then destroys the
    communicator."""
    c = completer_box[0]
    if c is not None:
        c.stop(timeout_s + 5)
    for i in reversed(range(len(holder))):  # send/recv's first, the same on every rank
        h = holder[i]
        holder[i] = None
        if h:
            _L.ringlet_comm_destroy(h)


# ---- creation ----

def _timeout_seconds(timeout):
    """torch's timeout for ringlet's deadline: an explicit one as given; torch's default (30
    minutes, which the backend cannot tell from an explicit 30 minutes) yields to
    RINGLET_TIMEOUT when that is set."""
    default = getattr(dist.distributed_c10d, "default_pg_timeout", None)
    if timeout is None or (timeout == default and os.environ.get("RINGLET_TIMEOUT")):
        return 0.0
    s = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
    return min(max(s, 0.1), 1e7)


def _exchange_ids(store, rank, size, n):
    """Group rank 0 makes n unique ids and puts them in torch's store; the others read them.
    Keys carry a generation (the store's counter of inits), so a store reused for a
    second init never hands out the first one's ids."""
    gen = (store.add("ringlet/inits", 1) - 1) // size
    ids = []
    for i in range(n):
        key = "ringlet/uid/%d/%d" % (gen, i)
        uid = _lib.UniqueId()
        if rank == 0:
            rc = _L.ringlet_get_unique_id(ctypes.byref(uid))
            if rc:
                msg = _L.ringlet_comm_last_error(None).decode("utf-8", "replace")
                raise RingletError(rc, "ringlet backend: unique id: " + msg)
            store.set(key, bytes(uid))
        else:
            raw = store.get(key)
            if len(raw) != ctypes.sizeof(uid):
                raise RuntimeError("ringlet backend: the unique id in torch's store under %r has %d bytes, expected %d"
                                   % (key, len(raw), ctypes.sizeof(uid)))
            ctypes.memmove(ctypes.byref(uid), raw, len(raw))
        ids.append(uid)
    return ids


def _create(store, rank, size, timeout, group_name="", global_ranks=None):
    """The group's two communicators (collectives; send and recv: see _Core), from unique
    ids handed out through torch's store, with torch's timeout as their deadline."""
    timeout_s = _timeout_seconds(timeout)
    cfg = _lib.CommConfig(ctypes.sizeof(_lib.CommConfig), timeout_s)
    handles = []
    try:
        for what, uid in zip(("collectives", "send/recv"), _exchange_ids(store, rank, size, 2)):
            h = _lib.c_comm()
            rc = _L.ringlet_comm_init_rank_config(ctypes.byref(h), size, uid, rank, ctypes.byref(cfg))
            if rc:
                msg = _L.ringlet_comm_last_error(None).decode("utf-8", "replace")
                raise RingletError(rc, "ringlet backend: init of group %s (rank %d of %d; its %s communicator): %s"
                                   % (group_name or "?", rank, size, what, msg))
            handles.append(h.value)
    except BaseException:
        for h in handles:  # a peer failed: no destroy to wait for
            _L.ringlet_comm_abort(h)
            _L.ringlet_comm_destroy(h)
        raise
    return ProcessGroupRinglet(handles, rank, size, timeout_s or _lib_timeout(), group_name, global_ranks)


def _lib_timeout():
    try:
        return float(os.environ.get("RINGLET_TIMEOUT") or 300)
    except ValueError:
        return 300.0


def _create_extended(opts, pg_options=None):
    """torch's creator (extended API): store, group rank and size, timeout, group name and
    the global ranks of the group's members."""
    return _create(opts.store, opts.group_rank, opts.group_size, opts.timeout, str(opts.group_id),
                   list(opts.global_ranks_in_group))


def _fill_launcher_env():
    """torch's env:// reads RANK and WORLD_SIZE; srun and mpirun set their own names.
    Filled in only where RANK and WORLD_SIZE are both unset (MASTER_ADDR and MASTER_PORT
    are still yours to set, as for ringlet_comm_init_env)."""
    env = os.environ
    if "RANK" in env or "WORLD_SIZE" in env:
        return None
    for rank, size, local, lsize, who in (
            ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
             "OMPI_COMM_WORLD_LOCAL_SIZE", "mpirun"),
            ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "srun")):
        if rank in env and size in env:
            env["RANK"], env["WORLD_SIZE"] = env[rank], env[size]
            if local in env and "LOCAL_RANK" not in env:
                env["LOCAL_RANK"] = env[local]
            if lsize in env and "LOCAL_WORLD_SIZE" not in env and env[lsize].isdigit():
                env["LOCAL_WORLD_SIZE"] = env[lsize]
            return who
    return None


_registered = False


def register():
    """Registers the backend "ringlet" with torch.distributed (once; `import ringlet.torch`
    does it): for CPU tensors, and for CUDA tensors where torch has CUDA."""
    global _registered
    if _registered:
        return
    plugins = getattr(dist.Backend, "_plugins", {})
    if BACKEND.upper() not in plugins:
        import inspect
        params = inspect.signature(dist.Backend.register_backend).parameters
        kw = {"extended_api": True}
        if "devices" in params:  # torch 2.x
            kw["devices"] = ["cpu"] + (["cuda"] if torch.version.cuda is not None else [])
        dist.Backend.register_backend(BACKEND, _create_extended, **kw)
    _fill_launcher_env()
    _registered = True


def _at_exit():
    # newest group first: every rank destroys its groups in the same order, so no group's
    # rank 0 waits for a rank that is waiting in another group's destroy
    for ref in reversed(_live_groups):
        pg = ref()
        if pg is not None:
            pg._finalizer()


import atexit  # noqa: E402

atexit.register(_at_exit)

"""ringlet: collective communication without NCCL, from Python.

    import ringlet
    ringlet.init_from_env()              # torchrun / ringlet-run / srun / mpirun variables
    ringlet.all_reduce(tensor)           # in place, sum; torch tensors (CPU, CUDA) or numpy arrays
    ringlet.broadcast(tensor, src=0)
    work = ringlet.all_reduce(t, op="avg", async_op=True); work.wait()

    from ringlet.torch import DistributedDataParallel as DDP
    model = DDP(model)                   # the training loop stays as with torch's DDP

Tensors: contiguous torch tensors (float16, bfloat16, float32, float64, int8, uint8, int32,
int64, bool as uint8) on the CPU or on a CUDA device, or numpy arrays. A call on CUDA
tensors is ordered on the tensor's device's current torch stream (it returns once its
operation is done, unless RINGLET_STREAM_HOLD=memop|kernel holds the stream instead: then
at once, as torch.distributed's NCCL backend does); one on CPU tensors returns when the
result is in place. Every tensor of one call is on the same device.

Errors raise RingletError, whose .code is the C result (ringlet.ERR_INVALID_USAGE, ...)
and whose message names the operation, the peer or the parameter.

The shared library: RINGLET_LIBRARY (a path to libringlet.so or its folder), else the
prefix `make install` recorded, an installed one (loader, pkg-config), else the source
tree's build/lib (see ringlet._lib). `python3 -m ringlet` says which it loaded.

PyTorch: `import ringlet.torch` registers the torch.distributed backend "ringlet"
(init_process_group("ringlet"): torch's own DDP, ZeRO, collectives) and provides ringlet's
own DDP class.
"""
import atexit
import collections
import ctypes
import datetime
import numbers
import os
import sys
import threading
import time
import weakref

from . import _lib
from ._lib import (  # noqa: F401  (re-exported)
    SUCCESS, ERR_CUDA, ERR_SYSTEM, ERR_INTERNAL, ERR_INVALID_ARGUMENT, ERR_INVALID_USAGE, ERR_REMOTE,
    IN_PROGRESS, ERR_TIMEOUT,
)

__all__ = [
    "RingletError", "Communicator", "Work", "init_from_env", "is_initialized", "get_rank", "get_world_size",
    "get_local_rank", "default_communicator", "destroy", "all_reduce", "broadcast", "reduce", "all_gather",
    "reduce_scatter", "barrier", "send", "recv", "version", "library_path", "__version__",
]

__version__ = "0.1.0"  # the package's; version() is the library's
library_path = _lib.path


def version():
    return _lib.lib.ringlet_version().decode()


class RingletError(RuntimeError):
    """A ringlet call failed. .code: the ringlet_result_t; .code_name: its text."""

    def __init__(self, code, message):
        self.code = int(code)
        self.code_name = _lib.strerror(self.code)
        super().__init__("%s (ringlet: %s)" % (message, self.code_name))


_OPS = {"sum": _lib.SUM, "prod": _lib.PROD, "product": _lib.PROD, "max": _lib.MAX, "min": _lib.MIN,
        "avg": _lib.AVG, "mean": _lib.AVG}


def _torch_op_name(op):
    """The name of a torch.distributed.ReduceOp, by equality as the torch backend maps
    them (on torch 1.13 str() of one says only "<...ReduceOp object at 0x...>"); else
    str(op). torch is not imported here for a program that has not."""
    if "torch" in sys.modules and not isinstance(op, (int, str)):
        try:
            from ._backend_tensors import _op_name
        except ImportError:  # a torch without torch.distributed
            return str(op)
        return _op_name(op)
    return str(op)


def _op(op):
    if isinstance(op, bool):  # an int to Python: True would run a product
        pass
    elif isinstance(op, int):
        if 0 <= op < 5:
            return op
    elif isinstance(op, str) and op.lower() in _OPS:
        return _OPS[op.lower()]
    else:  # torch.distributed.ReduceOp and the like
        name = _torch_op_name(op).split(".")[-1]
        if name.lower() in _OPS:
            return _OPS[name.lower()]
    raise ValueError("ringlet: unknown reduction op %r (sum, prod, max, min, avg)" % (op,))


def _is_bool(t):
    if _is_torch(t):
        return t.dtype == sys.modules["torch"].bool
    return getattr(getattr(t, "dtype", None), "name", None) == "bool"


def _rank_arg(v, what, size):
    """A peer's rank, checked here: ctypes would wrap one past 32 bits into a valid rank."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError("ringlet: %s: the rank must be an integer, not %r" % (what, v))
    v = int(v)
    if not 0 <= v < size:
        raise ValueError("ringlet: %s: rank %d is not a rank of this communicator (0 to %d)" % (what, v, size - 1))
    return v


def _reduce_op(t, op):
    """The ringlet op for tensor t: bool tensors reduce as bytes 0/1, so sum and max are
    "or", prod and min "and" (a byte sum would leave 2, not a bool)."""
    code = _op(op)
    if not _is_bool(t):
        return code
    if code in (_lib.SUM, _lib.MAX):
        return _lib.MAX
    if code in (_lib.PROD, _lib.MIN):
        return _lib.MIN
    raise ValueError("ringlet: avg is not defined for bool tensors (sum/max = or, prod/min = and)")


# ---- tensors: (pointer, element count, ringlet dtype) ----

_NUMPY_DTYPES = {"int8": _lib.INT8, "uint8": _lib.UINT8, "int32": _lib.INT32, "uint32": _lib.UINT32,
                 "int64": _lib.INT64, "uint64": _lib.UINT64, "float16": _lib.FLOAT16, "float32": _lib.FLOAT32,
                 "float64": _lib.FLOAT64, "bool": _lib.UINT8}
_torch_dtypes = None


def torch_dtype_code(dtype):
    """The ringlet dtype of a torch dtype (None if ringlet has none)."""
    global _torch_dtypes
    if _torch_dtypes is None:
        import torch
        _torch_dtypes = {torch.int8: _lib.INT8, torch.uint8: _lib.UINT8, torch.int32: _lib.INT32,
                         torch.int64: _lib.INT64, torch.float16: _lib.FLOAT16, torch.float32: _lib.FLOAT32,
                         torch.float64: _lib.FLOAT64, torch.bfloat16: _lib.BFLOAT16, torch.bool: _lib.UINT8}
    return _torch_dtypes.get(dtype)


def _is_torch(t):
    return "torch" in sys.modules and isinstance(t, sys.modules["torch"].Tensor)


def _stream_of(t):
    """The stream a call on tensor t is ordered on: torch's current stream of its CUDA
    device (as a cudaStream_t), None on the CPU."""
    if _is_torch(t) and t.device.type == "cuda":
        import torch
        return torch.cuda.current_stream(t.device).cuda_stream or _STREAM_DEFAULT
    return None


_STREAM_DEFAULT = 1  # RINGLET_STREAM_DEFAULT: CUDA's default stream (a cuda_stream of 0)


def _buffer(t, what, writable=True):
    if _is_torch(t):
        if t.device.type not in ("cpu", "cuda"):
            raise RingletError(_lib.ERR_INVALID_USAGE,
                               "%s: a %s tensor; ringlet takes CPU and CUDA tensors" % (what, t.device.type))
        if t.layout != sys.modules["torch"].strided:
            raise ValueError("ringlet: %s: a %s tensor; only dense tensors are supported" % (what, t.layout))
        if not t.is_contiguous():
            raise ValueError("ringlet: %s: the tensor is not contiguous (call .contiguous() and use the result)" % what)
        code = torch_dtype_code(t.dtype)
        if code is None:
            raise ValueError("ringlet: %s: dtype %s is not supported" % (what, t.dtype))
        return t.data_ptr(), t.numel(), code
    np = sys.modules.get("numpy")
    if np is not None and isinstance(t, np.ndarray):
        if not t.flags["C_CONTIGUOUS"]:
            raise ValueError("ringlet: %s: the array is not C-contiguous" % what)
        if writable and not t.flags["WRITEABLE"]:
            raise ValueError("ringlet: %s: the array is read-only" % what)
        if not t.dtype.isnative:  # the name says float32 for '>f4' too: its bytes would be taken as native
            raise ValueError("ringlet: %s: the array's byte order is not this machine's (%s); convert it with "
                             ".astype(a.dtype.newbyteorder('='))" % (what, t.dtype.str))
        code = _NUMPY_DTYPES.get(t.dtype.name)
        if code is None:
            raise ValueError("ringlet: %s: dtype %s is not supported" % (what, t.dtype))
        return t.ctypes.data, t.size, code
    raise TypeError("ringlet: %s: expected a torch.Tensor or a numpy.ndarray, got %s" % (what, type(t).__name__))


class Work:
    """A non-blocking operation (async_op=True). wait() raises RingletError on failure.
    Threads may share one: the C request is tested or waited for by one at a time (a
    completed test frees it), and is_completed() says False while another thread waits."""

    def __init__(self, comm, req, what, keep):
        self._comm = comm
        self._req = req
        self._what = what
        self._keep = keep  # the tensors stay alive while the operation runs
        self._rc = None
        self._gone = False
        self._mu = threading.Lock()

    def _on_request(self, fn):
        """fn() on the C request, the communicator held open meanwhile (a destroy of another
        thread waits for it). Destroyed or aborted before: destroy frees every request not
        waited for, so the C request is not touched; the work is over, failed."""
        if self._rc is not None:
            return
        if self._comm._enter() is None:
            self._finish(_lib.ERR_INVALID_USAGE)
            self._gone = True
            return
        try:
            fn()
        finally:
            self._comm._leave()

    def _test(self):
        done = ctypes.c_int(0)
        rc = _lib.lib.ringlet_test(ctypes.byref(self._req), ctypes.byref(done))
        if done.value or rc:
            self._finish(rc)

    def is_completed(self):
        if self._rc is not None:
            return True
        if not self._mu.acquire(blocking=False):
            return False  # another thread is waiting for it, or testing it
        try:
            self._on_request(self._test)
            return self._rc is not None
        finally:
            self._mu.release()

    def wait(self, timeout=None):
        """Blocks until done, within ringlet's deadline (RINGLET_TIMEOUT). With a timeout
        (seconds, or a datetime.timedelta; > 0) it raises RingletError (ERR_TIMEOUT) once that
        has passed, and the operation goes on: wait again, test it, or end the communicator.
        Polling, so that a KeyboardInterrupt can end the wait meanwhile."""
        limit = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else (timeout or 0)
        if limit > 0:
            until = time.monotonic() + limit
            nap = 1e-5
            while not self.is_completed():
                if time.monotonic() >= until:
                    raise RingletError(_lib.ERR_TIMEOUT, "ringlet.%s: wait timed out after %g s (the operation goes on)"
                                       % (self._what, limit))
                time.sleep(nap)
                nap = min(nap * 2, 1e-3)
        with self._mu:
            self._on_request(lambda: self._finish(_lib.lib.ringlet_wait(ctypes.byref(self._req))))
        if self._rc and self._gone:
            raise RingletError(self._rc, "ringlet.%s: the communicator was destroyed or aborted before this operation "
                               "was waited for" % self._what)
        if self._rc:
            raise self._comm._error(self._rc, self._what)
        return True

    def _finish(self, rc):
        self._rc = rc
        self._keep = None

    def __del__(self):  # (no other thread holds it any more)
        # Not waited for here: a wait could block for good (an irecv dropped before the send
        # its sender waits on). The communicator keeps the request and the tensors until the
        # operation is done (tested at its later calls) or the communicator ends.
        if self._rc is None and self._req and self._comm._handle:
            try:
                self._comm._orphans.append((self._req, self._keep))
            except Exception:
                pass


class Communicator:
    """A ringlet communicator (ringlet_comm_t)."""

    def __init__(self, handle):
        self._handle = handle
        # Calls inside the C communicator, counted under _calls: its end (destroy, abort)
        # takes the handle away, then waits for them, so that none enters freed memory.
        self._calls = threading.Condition()
        self._inflight = 0
        self._closing = None  # the handle while its end waits for the calls inside (an abort may use it)
        self._orphans = collections.deque()  # (request, tensors) of Works dropped unfinished
        self._ddps = weakref.WeakSet()  # DDP handles to close before the communicator
        r, s, lr, ls = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        self._check(_lib.lib.ringlet_comm_rank(handle, ctypes.byref(r)), "rank")
        self._check(_lib.lib.ringlet_comm_size(handle, ctypes.byref(s)), "size")
        self._check(_lib.lib.ringlet_comm_local_rank(handle, ctypes.byref(lr)), "local_rank")
        self._check(_lib.lib.ringlet_comm_local_size(handle, ctypes.byref(ls)), "local_size")
        self.rank, self.size, self.local_rank, self.local_size = r.value, s.value, lr.value, ls.value

    @classmethod
    def from_env(cls):
        h = _lib.c_comm()
        rc = _lib.lib.ringlet_comm_init_env(ctypes.byref(h))
        if rc:
            msg = _lib.lib.ringlet_comm_last_error(None).decode("utf-8", "replace")
            raise RingletError(rc, "ringlet.init_from_env: " + msg)
        return cls(h)

    def _live(self):
        if not self._handle:
            raise RingletError(_lib.ERR_INVALID_USAGE, "ringlet: the communicator was destroyed")
        return self._handle

    def _enter(self, abort=False):
        """The handle, counted as a call inside it until _leave; None once it was taken away
        (an abort: also while a destroy waits for the calls inside, which it may end)."""
        with self._calls:
            h = self._handle or (self._closing if abort else None)
            if h:
                self._inflight += 1
            return h

    def _leave(self):
        with self._calls:
            self._inflight -= 1
            if not self._inflight:
                self._calls.notify_all()

    def _take_handle(self, what):
        """Takes the handle away (new calls are refused), then waits for the calls inside it:
        each ends within its own deadline (RINGLET_TIMEOUT), or at once after an abort."""
        try:
            limit = float(os.environ.get("RINGLET_TIMEOUT") or 300) + 10
        except ValueError:  # init refused it; changed since
            limit = 310.0
        until = time.monotonic() + limit
        with self._calls:
            h, self._handle = self._handle, None
            if not h:  # another thread's destroy or abort took it (its wait goes on)
                return None
            self._closing = h
            try:
                while self._inflight:
                    left = until - time.monotonic()
                    if left <= 0:
                        self._handle = h
                        raise RingletError(_lib.ERR_TIMEOUT, "ringlet.%s: calls of other threads were still inside "
                                           "the communicator after %g s" % (what, limit))
                    self._calls.wait(left)
            finally:
                self._closing = None
        return h

    def _reap(self):
        """Tests the requests of Works dropped unfinished; lets go of those done."""
        for _ in range(len(self._orphans)):
            try:
                req, keep = self._orphans.popleft()
            except IndexError:
                return
            done = ctypes.c_int(0)
            rc = _lib.lib.ringlet_test(ctypes.byref(req), ctypes.byref(done))
            if not (done.value or rc):
                self._orphans.append((req, keep))

    def _error(self, rc, what, h=None):
        h = h or self._handle
        msg = _lib.lib.ringlet_comm_last_error(h).decode("utf-8", "replace") if h else ""
        return RingletError(rc, "ringlet.%s: %s" % (what, msg))

    def _check(self, rc, what):
        if rc:
            raise self._error(rc, what)

    def _run(self, what, blocking_fn, async_fn, args, async_op, keep):
        h = self._enter()
        if h is None:
            raise RingletError(_lib.ERR_INVALID_USAGE, "ringlet: the communicator was destroyed")
        try:
            if self._orphans:
                self._reap()
            stream = None
            for t in keep:  # CUDA tensors: ordered on their device's current torch stream
                stream = stream or (_stream_of(t) if t is not None else None)
            if async_op:
                req = _lib.c_req()
                rc = async_fn(*args, h, stream, ctypes.byref(req))
                if rc:
                    raise self._error(rc, what, h)
                return Work(self, req, what, keep)
            rc = blocking_fn(*args, h, stream)
            if rc:
                raise self._error(rc, what, h)
            return None
        finally:
            self._leave()

    # ---- collectives (in place unless an output is given) ----

    def all_reduce(self, tensor, op="sum", async_op=False, output=None):
        p, n, dt = _buffer(tensor, "all_reduce", writable=output is None)  # out of place: only read
        q = p
        if output is not None:
            q, m, dt2 = _buffer(output, "all_reduce output")
            if m != n or dt2 != dt:
                raise ValueError("ringlet: all_reduce: output has %d elements of dtype %d, input %d of %d"
                                 % (m, dt2, n, dt))
        L = _lib.lib
        return self._run("all_reduce", L.ringlet_allreduce, L.ringlet_iallreduce,
                         (p, q, n, dt, _reduce_op(tensor, op)), async_op, (tensor, output))

    def broadcast(self, tensor, src=0, async_op=False):
        p, n, dt = _buffer(tensor, "broadcast")
        L = _lib.lib
        return self._run("broadcast", L.ringlet_broadcast, L.ringlet_ibroadcast, (p, p, n, dt, _rank_arg(src, "broadcast src", self.size)),
                         async_op, (tensor,))

    def reduce(self, tensor, dst=0, op="sum", async_op=False):
        p, n, dt = _buffer(tensor, "reduce")
        L = _lib.lib
        return self._run("reduce", L.ringlet_reduce, L.ringlet_ireduce,
                         (p, p, n, dt, _reduce_op(tensor, op), _rank_arg(dst, "reduce dst", self.size)),
                         async_op, (tensor,))

    def all_gather(self, output, tensor, async_op=False):
        """output: a tensor of size * tensor.numel() elements, or a list of size tensors
        shaped like tensor (then this call blocks even with async_op, and returns a Work already
        complete)."""
        p, n, dt = _buffer(tensor, "all_gather input", writable=False)
        if isinstance(output, (list, tuple)):
            if len(output) != self.size:
                raise ValueError("ringlet: all_gather: %d output tensors for %d ranks" % (len(output), self.size))
            for r, o in enumerate(output):
                _, m, dt2 = _buffer(o, "all_gather output %d" % r)
                if m != n or dt2 != dt:
                    raise ValueError("ringlet: all_gather: output %d has %d elements of type %d, the input %d of "
                                     "type %d" % (r, m, dt2, n, dt))
            flat = _empty_like_n(tensor, n * self.size)
            self.all_gather(flat, tensor)
            for r, o in enumerate(output):
                _copy_into(o, flat, r * n, n)
            if not async_op:
                return None
            w = Work(self, None, "all_gather", None)
            w._finish(0)
            return w
        q, m, dt2 = _buffer(output, "all_gather output")
        if m != n * self.size or dt2 != dt:
            raise ValueError("ringlet: all_gather: output has %d elements, expected %d x %d" % (m, self.size, n))
        L = _lib.lib
        return self._run("all_gather", L.ringlet_allgather, L.ringlet_iallgather, (p, q, n, dt), async_op,
                         (output, tensor))

    def reduce_scatter(self, output, tensor, op="sum", async_op=False):
        """tensor: size * output.numel() elements; rank r gets the reduction of block r."""
        q, n, dt = _buffer(output, "reduce_scatter output")
        p, m, dt2 = _buffer(tensor, "reduce_scatter input", writable=False)
        if m != n * self.size or dt2 != dt:
            raise ValueError("ringlet: reduce_scatter: input has %d elements, expected %d x %d" % (m, self.size, n))
        L = _lib.lib
        return self._run("reduce_scatter", L.ringlet_reduce_scatter, L.ringlet_ireduce_scatter,
                         (p, q, n, dt, _reduce_op(tensor, op)), async_op, (output, tensor))

    def barrier(self, async_op=False):
        L = _lib.lib
        return self._run("barrier", L.ringlet_barrier, L.ringlet_ibarrier, (), async_op, ())

    def send(self, tensor, dst, async_op=False):
        p, n, dt = _buffer(tensor, "send", writable=False)
        L = _lib.lib
        return self._run("send", L.ringlet_send, L.ringlet_isend, (p, n, dt, _rank_arg(dst, "send dst", self.size)), async_op,
                         (tensor,))

    def recv(self, tensor, src, async_op=False):
        p, n, dt = _buffer(tensor, "recv")
        L = _lib.lib
        return self._run("recv", L.ringlet_recv, L.ringlet_irecv, (p, n, dt, _rank_arg(src, "recv src", self.size)), async_op,
                         (tensor,))

    # ---- life ----

    def _close_ddps(self):
        for h in list(self._ddps):
            h.close()

    def destroy(self):
        """Collective clean shutdown (closes the DDP objects made on it first). Calls of other
        threads still inside it are waited for first (each within its deadline); later ones
        raise RingletError."""
        if self._handle:
            self._close_ddps()
            h = self._take_handle("destroy")
            if not h:
                return
            rc = _lib.lib.ringlet_comm_destroy(h)
            if rc == _lib.ERR_TIMEOUT:
                self._handle = h  # left allocated by C: a later destroy frees it
            else:
                self._orphans.clear()  # their C requests went with the communicator
            self._check_rc_after(rc, "destroy")

    def abort(self):
        """Stops every operation at once (ringlet_comm_abort): the communicator first, then
        the DDP objects made on it, whose close waits for their all-reduces in flight, which
        only an aborted communicator ends at once."""
        h = self._enter(abort=True)
        if h is None:
            return
        try:
            _lib.lib.ringlet_comm_abort(h)
        finally:
            self._leave()
        self._close_ddps()
        h = self._take_handle("abort")
        if h:
            _lib.lib.ringlet_comm_destroy(h)  # frees the handle once other threads' calls left
            self._orphans.clear()

    def _check_rc_after(self, rc, what):
        if rc:
            msg = _lib.lib.ringlet_comm_last_error(None).decode("utf-8", "replace")
            raise RingletError(rc, "ringlet.%s: %s" % (what, msg))

    def async_error(self):
        """None while the communicator works, else a RingletError saying what broke it."""
        h = self._enter()
        if h is None:
            return None
        try:
            rc = _lib.lib.ringlet_comm_get_async_error(h)
            return self._error(rc, "async_error", h) if rc else None
        finally:
            self._leave()


def _empty_like_n(t, n):
    if _is_torch(t):
        import torch
        return torch.empty(n, dtype=t.dtype, device=t.device)
    import numpy
    return numpy.empty(n, dtype=t.dtype)


def _copy_into(o, flat, off, n):
    if _is_torch(o):
        o.view(-1).copy_(flat[off:off + n])
    else:
        o.reshape(-1)[:] = flat[off:off + n]


# ---- the default communicator (as torch.distributed's default group) ----

_default = None
_lock = threading.Lock()


def init_from_env():
    """Creates the default communicator from the launcher's environment (torchrun's
    MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE/LOCAL_RANK, ringlet-run, Slurm, Open MPI);
    returns it. A second call returns the same one."""
    global _default
    with _lock:
        if _default is None or not _default._handle:
            _default = Communicator.from_env()
            atexit.register(_at_exit)
        return _default


def _exiting_on_error():
    """At exit: whether the program ends with an uncaught exception (sys.last_value is
    set for it before atexit handlers run; not for sys.exit). Not in an interactive session,
    where it stays set after any error the user went on from."""
    if hasattr(sys, "ps1") or sys.flags.interactive:
        return False
    return getattr(sys, "last_value", None) is not None


def _at_exit():
    global _default
    c = _default
    if c is not None and c._handle:
        if _exiting_on_error():
            # a clean destroy would tell the peers this rank left in good order, and one
            # still waiting for it in a collective would wait out RINGLET_TIMEOUT: an abort
            # makes it fail at once, naming this rank
            c.abort()
            return
        try:
            c.destroy()
        except RingletError as e:
            print("ringlet: at exit: %s" % e, file=sys.stderr)


def is_initialized():
    return _default is not None and bool(_default._handle)


def default_communicator():
    if not is_initialized():
        raise RingletError(_lib.ERR_INVALID_USAGE, "ringlet: call ringlet.init_from_env() first")
    return _default


def destroy():
    """Destroys the default communicator (collective)."""
    global _default
    if _default is not None:
        c, _default = _default, None
        c.destroy()


def _c(comm):
    return comm if comm is not None else default_communicator()


def get_rank(comm=None):
    return _c(comm).rank


def get_world_size(comm=None):
    return _c(comm).size


def get_local_rank(comm=None):
    return _c(comm).local_rank


def all_reduce(tensor, op="sum", async_op=False, comm=None):
    return _c(comm).all_reduce(tensor, op=op, async_op=async_op)


def broadcast(tensor, src=0, async_op=False, comm=None):
    return _c(comm).broadcast(tensor, src=src, async_op=async_op)


def reduce(tensor, dst=0, op="sum", async_op=False, comm=None):
    return _c(comm).reduce(tensor, dst=dst, op=op, async_op=async_op)


def all_gather(output, tensor, async_op=False, comm=None):
    return _c(comm).all_gather(output, tensor, async_op=async_op)


def reduce_scatter(output, tensor, op="sum", async_op=False, comm=None):
    return _c(comm).reduce_scatter(output, tensor, op=op, async_op=async_op)


def barrier(async_op=False, comm=None):
    return _c(comm).barrier(async_op=async_op)


def send(tensor, dst, async_op=False, comm=None):
    return _c(comm).send(tensor, dst, async_op=async_op)


def recv(tensor, src, async_op=False, comm=None):
    return _c(comm).recv(tensor, src, async_op=async_op)


def __getattr__(name):
    # `ringlet.torch` without an explicit `import ringlet.torch`
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError("module 'ringlet' has no attribute %r" % name)

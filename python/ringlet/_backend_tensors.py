"""The torch backend's shared pieces: ringlet's dtypes and ops for torch's, tensors as
ringlet buffers, and the futures its Works complete (see torch_backend.py)."""
import torch
from torch._C import _distributed_c10d as _c10d

from . import _lib

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


def _landing(t):
    """Where an operation writes t's elements: t itself where it is contiguous, else a
    contiguous tensor like it, which the caller copies into t once the operation is done."""
    return t if t.is_contiguous() else torch.empty(t.shape, dtype=t.dtype, device=t.device)


def _adjacent(tensors, nbytes):
    """The tensors lie one after the other, contiguous, nbytes each: one buffer."""
    if not tensors:
        return False
    base = tensors[0].data_ptr()
    for i, t in enumerate(tensors):
        if not t.is_contiguous() or _nbytes(t) != nbytes or t.data_ptr() != base + i * nbytes:
            return False
    return True


def _one_storage(tensors):
    """The tensors are views of one storage (separate tensors may lie back to back in
    memory, but a view spanning them is refused by torch)."""
    def ptr(t):
        try:
            return t.untyped_storage().data_ptr()
        except AttributeError:  # torch 1.x
            return t.storage().data_ptr()
    first = ptr(tensors[0])
    return all(ptr(t) == first for t in tensors[1:])


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


def _failed_future(err):
    """A future (as get_future hands out) already failed with err."""
    base, user = _future()
    base.set_result(_Failed(err))
    return user

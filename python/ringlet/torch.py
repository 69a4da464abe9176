"""ringlet for PyTorch: the torch.distributed backend "ringlet", and ringlet's own DDP class.

Importing this module registers the backend "ringlet" with torch.distributed
(ringlet/torch_backend.py), so that torch's own collectives, DistributedDataParallel,
ZeroRedundancyOptimizer and new_group run on ringlet:

    import torch.distributed as dist
    import ringlet.torch
    dist.init_process_group("ringlet")      # torchrun, ringlet-run (env://), srun, mpirun
    model = torch.nn.parallel.DistributedDataParallel(model)

The rest of this module is ringlet's own DDP class, the PyTorch front of ringlet's DDP
layer (include/ringlet_ddp.h):

    import ringlet
    from ringlet.torch import DistributedDataParallel as DDP

    ringlet.init_from_env()                 # optional: DDP does it when nothing is initialised
    model = DDP(model, bucket_cap_mb=25)    # broadcasts rank 0's parameters and buffers
    for x, y in data:
        opt.zero_grad()
        loss_fn(model(x), y).backward()     # gradients averaged over the ranks when it returns
        opt.step()

    with model.no_sync():                   # accumulate locally ...
        loss_fn(model(x1), y1).backward()
    loss_fn(model(x2), y2).backward()       # ... and reduce the sum once

How it hooks into autograd: one post-hook per parameter on its AccumulateGrad node
(called once the gradient has been accumulated into .grad) reports "gradient i is
ready" to the C layer, which copies it into its bucket and starts the bucket's
all-reduce as soon as the bucket is complete, while backward goes on. The first hook of
a backward queues a callback on the autograd engine that runs when backward ends: it
waits for every bucket and writes the averaged gradients back into .grad (nothing to
write with gradient_as_bucket_view, where .grad is a view into its bucket). Errors
found in hooks (a gradient reported twice, ...) are raised from that callback, that is
from loss.backward(), after every bucket has run, so the other ranks are not left
waiting and they raise too.

CUDA modules: the buckets live in device memory, and every copy into a bucket, the
compression, the all-reduces and the write-back are queued on torch's current stream of
the module's device (taken at each forward), so the optimizer step that follows on that
stream sees the reduced gradients without any host synchronisation in between. Calls
into ringlet run with the module's device current (torch.cuda.set_device is not needed).
Several ranks may share one GPU.

Launch with `ringlet-run -n 4 python3 train.py` or `torchrun --nproc_per_node 4 train.py` (torch 1.13 on
Python 3.11: add `--redirects 2 --tee 2`; README, "DDP and PyTorch").
Works with the PyTorch 1.13 of Debian (CPU) and PyTorch 2.x (CPU and CUDA).
"""
import contextlib
import ctypes
import dataclasses
import os
import sys
import time
import warnings
import weakref

import torch

import ringlet
from ringlet import _lib, RingletError
from ringlet.torch_backend import ProcessGroupRinglet, register as register_backend

__all__ = ["DistributedDataParallel", "ProcessGroupRinglet", "register_backend"]

register_backend()

_COMPRESSION = {None: _lib.DDP_COMPRESS_NONE, "none": _lib.DDP_COMPRESS_NONE,
                "fp16": _lib.DDP_COMPRESS_FLOAT16, "float16": _lib.DDP_COMPRESS_FLOAT16,
                "half": _lib.DDP_COMPRESS_FLOAT16,
                "bf16": _lib.DDP_COMPRESS_BFLOAT16, "bfloat16": _lib.DDP_COMPRESS_BFLOAT16}


def _cap_mb(v, what, default):
    """A bucket cap in MiB: None is the default (torch's DDP takes None so), else > 0."""
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or v == float("inf"):
        raise ValueError("ringlet DDP: %s must be a number of MiB > 0 (or None: %s), not %r" % (what, default, v))
    if v * 1024 * 1024 >= 2 ** 63:  # a size_t of its bytes would wrap (2**44 MiB became 512 KiB)
        raise ValueError("ringlet DDP: %s of %r MiB is more bytes than a size holds" % (what, v))
    return v


def _compression_code(c):
    if c is torch.float16:
        return _lib.DDP_COMPRESS_FLOAT16
    if c is torch.bfloat16:
        return _lib.DDP_COMPRESS_BFLOAT16
    key = c.lower() if isinstance(c, str) else c
    if key not in _COMPRESSION:
        raise ValueError("ringlet DDP: compression must be None, 'fp16' or 'bf16', not %r" % (c,))
    return _COMPRESSION[key]


class _DeviceMemory:
    """Device memory of the C layer seen by torch (through __cuda_array_interface__): the
    tensor made from it keeps this object, and so the C object, alive."""

    def __init__(self, ptr, count, typestr, owner):
        self.__cuda_array_interface__ = {"shape": (count,), "typestr": typestr, "data": (ptr, False),
                                         "version": 2, "strides": None}
        self._ringlet_owner = owner


_TYPESTR = {torch.float16: "<f2", torch.float32: "<f4", torch.float64: "<f8"}


def _need_numpy():
    """torch.as_tensor reads __cuda_array_interface__ (the buckets' views) through numpy."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        raise RingletError(_lib.ERR_INVALID_USAGE,
                           "ringlet DDP on CUDA tensors needs numpy (torch.as_tensor reads the buckets' "
                           "__cuda_array_interface__ through it): pip install numpy") from None


def _device_tensor(ptr, count, dtype, device, owner):
    """A CUDA tensor over count elements at device address ptr, and the object its memory
    keeps alive (while any view of it lives)."""
    if dtype == torch.bfloat16:  # no typestr for bfloat16: as int16, reinterpreted
        mem = _DeviceMemory(ptr, count, "<i2", owner)
        return torch.as_tensor(mem, device=device).view(torch.bfloat16), mem
    mem = _DeviceMemory(ptr, count, _TYPESTR[dtype], owner)
    return torch.as_tensor(mem, device=device), mem


def _ringlet_group(pg):
    """The ProcessGroupRinglet behind pg (torch 2.x wraps a Python backend's group), or None."""
    if isinstance(pg, ProcessGroupRinglet):
        return pg
    get = getattr(pg, "_get_backend", None)
    if get is not None and not isinstance(pg, ringlet.Communicator):
        try:
            b = get(torch.device("cpu"))
        except Exception:  # noqa: BLE001  (no backend for the CPU: not ours)
            return None
        if isinstance(b, ProcessGroupRinglet):
            return b
    return None


def _default_comm():
    """No comm nor process_group given: torch.distributed's default group where it is the
    backend "ringlet" (a communicator split from it), else ringlet's default communicator.
    Made from the environment after torch's init_process_group (env://, whose store holds
    MASTER_PORT), rank 0 listens on MASTER_PORT + 1, as under torchrun."""
    import torch.distributed as dist
    if ringlet.is_initialized():
        return ringlet.default_communicator()
    if dist.is_available() and dist.is_initialized():
        g = _ringlet_group(dist.group.WORLD)
        if g is not None:
            return g
        port = os.environ.get("MASTER_PORT", "")
        if (port.isdigit() and int(port) < 65535 and not os.environ.get("RINGLET_BOOTSTRAP_PORT")
                and not os.environ.get("TORCHELASTIC_RUN_ID")):
            os.environ["RINGLET_BOOTSTRAP_PORT"] = str(int(port) + 1)
    return ringlet.init_from_env()


def _dense(t):
    """Its numel() elements fill the memory from data_ptr() on: contiguous in a memory format."""
    if t.is_contiguous():
        return True
    if t.dim() == 4:
        return t.is_contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return t.is_contiguous(memory_format=torch.channels_last_3d)
    return False


def _make_hook(me, i):
    """Parameter i's hook for the DDP that me (a weak reference) names: it holds the DDP
    only weakly, so a DDP dropped without close() goes (and its finalizer removes its
    hooks); a hook of one gone meanwhile does nothing."""
    def hook(*_):
        ddp = me()
        if ddp is not None:
            ddp._hook(i)
    return hook


def _remove_hooks(handles):
    while handles:
        handles.pop().remove()


class _Handle:
    """Owns the C DDP object. Bucket tensors (gradient views) hold a reference to it, so
    the bucket memory lives as long as any of them; the communicator closes it first
    when it is destroyed, and a close (by the DDP's close() or by the communicator's)
    first moves every parameter's .grad that is still a view into bucket memory to memory
    of its own, so that no gradient points into freed memory (nor a reference to it that
    the program kept; only a view the program made of one)."""

    def __init__(self, ptr):
        self.ptr = ptr
        self.ranges = []  # (start, end) addresses of every bucket memory made (rebuilds too)
        self.params = []  # weak references to the parameters whose .grad may be such a view
        self.stream = None  # CUDA: the DDP's stream (the write-backs are queued there)

    def in_buckets(self, t):
        # a sparse gradient has no data pointer (never a view into a bucket)
        return t.layout == torch.strided and t.numel() > 0 and any(s <= t.data_ptr() < e for s, e in self.ranges)

    def _detach_views(self):
        grads = []
        for r in self.params:
            p = r()
            g = None if p is None else p.grad
            if g is not None and self.in_buckets(g):
                grads.append((p, g))
        if not grads:
            return
        # Each gradient tensor takes the copy's storage in place (set_), rather than
        # .grad a new tensor: a reference the program kept to it (g = p.grad, a gradient
        # history) then reads the copy too, not freed memory. (A view the program made of
        # it, g.view(-1), still points into the bucket.)
        with torch.no_grad():
            if self.stream is None:
                for p, g in grads:
                    g.set_(g.clone())
                return
            # on the DDP's stream, behind its write-backs (the C destroy then waits for that
            # stream before it frees the buckets); the current stream waits for the copies,
            # and their memory counts as used there (the allocator gave it to the DDP's)
            cur = torch.cuda.current_stream(self.stream.device)
            with torch.cuda.stream(self.stream):
                copies = [g.clone() for _, g in grads]
            cur.wait_stream(self.stream)
            for (p, g), c in zip(grads, copies):
                if cur != self.stream:
                    c.record_stream(cur)
                g.set_(c)

    def close(self):
        if self.ptr:
            try:
                self._detach_views()
            except Exception as e:  # a failed device or no memory: the C object goes all the same
                print("ringlet DDP: gradients that were bucket views could not be copied out (%s); they "
                      "point into freed memory now" % e, file=sys.stderr)
            finally:
                p, self.ptr = self.ptr, None
                _lib.lib.ringlet_ddp_destroy(p)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _find_tensors(obj):
    """Every tensor in a (nested) output: tensors, lists, tuples, dicts, dataclasses (as
    torch's DDP walks them)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _find_tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _find_tensors(o)]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [t for f in dataclasses.fields(obj) for t in _find_tensors(getattr(obj, f.name))]
    return []


# The code through which autograd runs a Python Function's backward: a backward's end
# that finds it on its stack is that of a backward run inside that Function's.
_FUNCTION_BACKWARD = getattr(getattr(getattr(torch.autograd.function, "BackwardCFunction", None), "apply", None),
                             "__code__", None)


def _inside_function_backward():
    f = sys._getframe(1)
    while f is not None:
        if f.f_code is _FUNCTION_BACKWARD:
            return True
        f = f.f_back
    return False


def _inputs_to(obj, device):
    """obj with every tensor in it on device (lists, tuples, named tuples and dicts walked)."""
    if isinstance(obj, torch.Tensor):
        return obj if obj.device == device else obj.to(device)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_inputs_to(o, device) for o in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_inputs_to(o, device) for o in obj)
    if isinstance(obj, dict):
        pairs = [(k, _inputs_to(v, device)) for k, v in obj.items()]
        try:
            return type(obj)(pairs)
        except TypeError:  # a dict type that is not made from pairs (defaultdict)
            return dict(pairs)
    return obj


class DistributedDataParallel(torch.nn.Module):
    """Data parallelism over ringlet, with the interface of torch's DistributedDataParallel.

    module                  the model (its parameters on the CPU or on one CUDA device)
    comm / process_group    a ringlet.Communicator (default: ringlet's default one, created
                            from the environment if there is none)
    bucket_cap_mb           cap of a gradient bucket (25; None: 25); the first bucket: first_bucket_cap_mb (1)
                            (the arguments after comm are keyword-only: torch's positional order differs)
    broadcast_buffers       broadcast buffers from rank 0 before each forward (True)
    find_unused_parameters  parameters the forward's output does not depend on count as unused
                            (found by walking the autograd graph after forward); without it, a
                            parameter that gets no gradient is an error naming it (False)
    gradient_as_bucket_view .grad of every parameter is a view into its bucket: no copies (False)
    compression             None, 'fp16' or 'bf16': float32 buckets travel in 16 bits
    average_gradients       divide the summed gradients by the world size (True)
    init_sync               broadcast rank 0's parameters and buffers at construction (True)
    rebuild_buckets         after the first backward, reassign the buckets in the order rank 0's
                            gradients became ready, as torch's DDP does (True)
    """

    def __init__(self, module, comm=None, *, bucket_cap_mb=25, broadcast_buffers=True, find_unused_parameters=False,
                 gradient_as_bucket_view=False, compression=None, first_bucket_cap_mb=1, average_gradients=True,
                 init_sync=True, rebuild_buckets=True, process_group=None, device_ids=None, output_device=None,
                 dim=0):
        super().__init__()
        self.module = module
        if comm is None:
            comm = process_group
        if comm is None:
            comm = _default_comm()
        group = _ringlet_group(comm)
        if group is not None:
            comm = group._ddp_communicator()
        if not isinstance(comm, ringlet.Communicator):
            raise TypeError("ringlet DDP: comm must be a ringlet.Communicator or a process group of the backend "
                            "\"ringlet\", not %s%s" % (type(comm).__name__, " (torch's device_ids is the keyword "
                            "argument device_ids= here)" if isinstance(comm, (list, tuple)) else ""))
        devices = {p.device for p in module.parameters()} | {b.device for b in module.buffers()}
        if len(devices) > 1:
            raise RingletError(_lib.ERR_INVALID_USAGE,
                               "ringlet DDP: the module's tensors are on several devices (%s); one device per "
                               "module (as torch's DDP for single-device modules)"
                               % ", ".join(sorted(str(d) for d in devices)))
        self.device = devices.pop() if devices else torch.device("cpu")
        if device_ids not in (None, []) and [torch.device(d) if not isinstance(d, int) else torch.device("cuda", d)
                                             for d in device_ids] != [self.device]:
            raise RingletError(_lib.ERR_INVALID_USAGE,
                               "ringlet DDP: device_ids %s, but the module is on %s (move it there first)"
                               % (device_ids, self.device))
        self._cuda = self.device.type == "cuda"
        # device_ids given: the inputs go to the module's device in forward, as torch's DDP
        # moves them (tensors inside lists, tuples, named tuples and dicts too)
        self._move_inputs = device_ids not in (None, []) and self.device.type != "cpu"
        if self._cuda:
            _need_numpy()  # before the collective create (after it, the C object would be left behind)
        self.comm = comm
        self.dim = dim
        self.broadcast_buffers = bool(broadcast_buffers)
        self.find_unused_parameters = bool(find_unused_parameters)
        self.gradient_as_bucket_view = bool(gradient_as_bucket_view)
        self.require_backward_grad_sync = True

        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        self._param_names = [n for n, _ in named]
        self._params = [p for _, p in named]
        for n, p in named:
            if p.is_sparse:
                raise ValueError("ringlet DDP: parameter %s is sparse; only dense parameters are supported" % n)
            if not p.is_contiguous():
                with torch.no_grad():
                    p.data = p.data.contiguous()
        self._buffer_names = [n for n, _ in module.named_buffers()]
        # frozen parameters: rank 0's at construction, as torch's DDP makes them, then left
        # alone (the C layer's init-only buffers: not broadcast before forwards)
        frozen = []
        for n, p in module.named_parameters():
            if p.requires_grad:
                continue
            if p.is_sparse or not _dense(p):
                warnings.warn("ringlet DDP: frozen parameter %s (%s, %s) is not made rank 0's at construction: "
                              "ringlet broadcasts dense tensors only" % (n, p.dtype, p.layout))
                continue
            frozen.append((n, p))

        opts = _lib.DDPOptions()
        _lib.lib.ringlet_ddp_options_init(ctypes.byref(opts))
        opts.bucket_cap_bytes = max(1, int(_cap_mb(bucket_cap_mb, "bucket_cap_mb", 25) * 1024 * 1024))
        opts.first_bucket_cap_bytes = max(1, int(_cap_mb(first_bucket_cap_mb, "first_bucket_cap_mb", 1) * 1024 * 1024))
        opts.broadcast_buffers = int(self.broadcast_buffers)
        opts.average_gradients = int(bool(average_gradients))
        opts.find_unused_parameters = int(self.find_unused_parameters)
        opts.gradient_as_bucket_view = int(self.gradient_as_bucket_view)
        opts.compression = _compression_code(compression)
        opts.init_sync = int(bool(init_sync))
        opts.rebuild_buckets = int(bool(rebuild_buckets))
        opts.init_only_buffers = len(frozen)
        opts.stream = self._stream()
        self._ddp_stream = torch.cuda.current_stream(self.device) if self._cuda else None

        self._keep = []  # names and shapes the C descriptors point to (only during create)
        ptens = (_lib.DDPTensor * max(1, len(named)))()
        for i, (n, p) in enumerate(named):
            self._describe(ptens[i], n, p, p.grad)
        buffers = self._current_buffers()
        btens = (_lib.DDPTensor * max(1, len(buffers) + len(frozen)))()
        for j, b in enumerate(buffers):
            self._describe(btens[j], self._buffer_names[j], b, None, as_bytes=True)
        for j, (n, p) in enumerate(frozen):
            self._describe(btens[len(buffers) + j], n + " (frozen)", p, None, as_bytes=True)
        h = _lib.c_ddp()
        with torch.no_grad(), self._on_device():
            rc = _lib.lib.ringlet_ddp_create(ctypes.byref(h), comm._live(), ptens, len(named), btens,
                                             len(buffers) + len(frozen), ctypes.byref(opts))
        self._keep = None
        if rc:
            raise RingletError(rc, "ringlet DDP: " + _lib.lib.ringlet_ddp_last_error(None).decode("utf-8", "replace"))
        self._h = _Handle(h)
        self._h.params = [weakref.ref(p) for p in self._params]
        self._h.stream = self._ddp_stream
        comm._ddps.add(self._h)
        self._buffer_ptrs = [b.data_ptr() for b in buffers]
        self._buffer_kinds = [(b.numel(), b.dtype, b.device) for b in buffers]
        self._param_kinds = [(p.numel(), p.dtype, p.device) for p in self._params]

        self._rebuilds = 0
        self._retired_memory = []
        self.retired_bytes_freed = 0  # bucket memory of the layout before a rebuild, freed since
        self._build_views(h)
        if self.gradient_as_bucket_view:
            for p, v in zip(self._params, self._views):
                p.grad = v  # the C layer copied any existing gradient into it

        # hooks: removed by close() or when this object goes (a module wrapped again, the
        # old wrapper dropped: its hooks would go on firing on the shared parameters)
        self._grad_accs = []
        self._hook_handles = []
        me = weakref.ref(self)
        with torch.enable_grad():  # a DDP built under no_grad: expand_as records no graph there
            for i, p in enumerate(self._params):
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._hook_handles.append(acc.register_hook(_make_hook(me, i)))
                self._grad_accs.append(acc)
        weakref.finalize(self, _remove_hooks, self._hook_handles)
        self._expect_hooks = False
        self._nosync_usage = False
        self._callback_queued = False
        self._finish_pending = False  # _inner_backward_end
        self._ready = bytearray(len(self._params))
        self._unused = set()
        self._undefined = []  # parameters whose gradient came back undefined this backward
        self._unused_marked = False
        self._hook_error = None
        self._first_hook_time = None
        self.backward_hook_times = None  # (first hook, callback) of the last backward

    # ---- construction helpers ----

    def _build_views(self, h):
        """Bucket memory as tensors (the C layer owns it); per parameter a view of its slot."""
        nb = ctypes.c_int()
        self._check(_lib.lib.ringlet_ddp_num_buckets(h, ctypes.byref(nb)), "num_buckets")
        self._bucket_tensors = []
        self._bucket_memory = []  # weak references to what each bucket tensor's memory keeps alive
        for b in range(nb.value):
            info = _lib.DDPBucketInfo()
            self._check(_lib.lib.ringlet_ddp_bucket_info(h, b, ctypes.byref(info)), "bucket_info")
            dtype = self._params[info.first_param].dtype
            esize = torch.empty(0, dtype=dtype).element_size()
            if info.count == 0:
                t = torch.empty(0, dtype=dtype, device=self.device)
            elif self._cuda:
                t, mem = _device_tensor(info.memory, info.count, dtype, self.device, self._h)
                self._bucket_memory.append(weakref.ref(mem))
            else:
                raw = (ctypes.c_byte * (info.count * esize)).from_address(info.memory)
                raw._ringlet_owner = self._h  # the C memory lives while any view does
                t = torch.frombuffer(raw, dtype=dtype, count=info.count)
                self._bucket_memory.append(weakref.ref(raw))
            self._bucket_tensors.append(t)
            if t.numel():
                self._h.ranges.append((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()))
        self._views = []
        self._bucket_of = []
        for i, p in enumerate(self._params):
            bi, off = ctypes.c_int(), ctypes.c_size_t()
            self._check(_lib.lib.ringlet_ddp_param_bucket(h, i, ctypes.byref(bi), ctypes.byref(off)), "param_bucket")
            self._bucket_of.append(bi.value)
            self._views.append(self._bucket_tensors[bi.value][off.value:off.value + p.numel()].view(p.shape))

    def _after_rebuild(self, h):
        """The C layer reassigned the buckets (rebuild_buckets): new views; gradients that
        were views were moved there with their content. The old bucket memory is freed
        once no tensor uses it any more (_free_retired), as torch's DDP frees its old
        buckets: it would double the gradients' memory for the DDP's life."""
        old = [v.data_ptr() for v in self._views]
        self._retired_memory = self._retired_memory + self._bucket_memory
        self._build_views(h)
        if self.gradient_as_bucket_view:
            for p, o, v in zip(self._params, old, self._views):
                if p.grad is not None and p.grad.data_ptr() == o:
                    p.grad = v
        self._free_retired(h)

    def _free_retired(self, h):
        """Frees the buckets a rebuild replaced once nothing holds a view of them (a
        gradient the caller kept from before the rebuild keeps them until it goes)."""
        if not self._retired_memory or any(r() is not None for r in self._retired_memory):
            return
        freed = ctypes.c_size_t(0)
        self._check(_lib.lib.ringlet_ddp_free_retired(h, ctypes.byref(freed)), "free_retired")
        self._retired_memory = []
        self.retired_bytes_freed += freed.value
        self._h.ranges = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())
                          for t in self._bucket_tensors if t.numel()]

    def _describe(self, d, name, t, grad, as_bytes=False):
        """as_bytes (buffers, frozen parameters: only broadcast): a dtype ringlet has no
        arithmetic for (complex, int16, float8...) goes as its bytes, the element size a last
        dimension and the dtype in the name, so that the ranks' checks compare it too."""
        if t.device.type == "cpu" and t.layout != torch.strided:
            raise ValueError("ringlet DDP: %s is a %s tensor; only dense tensors are supported" % (name, t.layout))
        if not _dense(t):  # its bytes from data_ptr on are not its elements
            raise ValueError("ringlet DDP: %s is strided (shape %s, strides %s); buffers and frozen parameters must "
                             "be dense (contiguous, or channels_last)" % (name, tuple(t.shape), t.stride()))
        code = ringlet.torch_dtype_code(t.dtype)
        dims = list(t.shape)
        if code is None and as_bytes:
            code = _lib.UINT8
            dims.append(t.element_size())
            name = "%s [%s as bytes]" % (name, str(t.dtype).replace("torch.", ""))
        if code is None:
            raise ValueError("ringlet DDP: %s has dtype %s, which ringlet does not handle" % (name, t.dtype))
        nm = name.encode()
        shape = (ctypes.c_int64 * max(1, len(dims)))(*dims)
        self._keep += [nm, shape]
        d.name = nm
        d.data = t.data_ptr() if t.numel() else None
        d.grad = grad.data_ptr() if grad is not None and grad.numel() and grad.is_contiguous() else None
        d.count = t.numel() * (dims[-1] if len(dims) > t.dim() else 1)
        d.dtype = code
        d.memory = _lib.DDP_HOST if t.device.type == "cpu" else _lib.DDP_DEVICE
        d.ndim = len(dims)
        d.shape = shape

    def _on_device(self):
        """The module's device made current (torch's device guard) around calls into the C
        layer, which makes buckets on the current device and takes the default stream as
        that device's: the caller's thread may be on another GPU (no torch.cuda.set_device).
        autograd's hooks run on its thread of the gradients' device already."""
        return torch.cuda.device(self.device) if self._cuda else contextlib.nullcontext()

    def _stream(self):
        """The stream the C layer orders its work on: torch's current one on the module's
        CUDA device (None on the CPU)."""
        if not self._cuda:
            return None
        return torch.cuda.current_stream(self.device).cuda_stream or 1  # 1: CUDA's default stream

    def _join_ddp_stream(self, tensors=()):
        """Before the C layer queues work on the DDP's stream (the forward's): that stream
        waits for the work queued so far on the current one, where the gradients were made
        and put in place. autograd runs a parameter's hook on the stream its AccumulateGrad
        node recorded, and the end-of-backward callback on the caller's, and either may
        differ from the forward's (a DDP built, or trained, under torch.cuda.stream). The
        tensors the C layer reads or writes later are marked as used on the DDP's stream,
        so that the caching allocator does not give their memory out again before that
        work is done (zero_grad(set_to_none=True) frees the gradients)."""
        if not self._cuda:
            return
        cur = torch.cuda.current_stream(self.device)
        if cur == self._ddp_stream:
            return
        self._ddp_stream.wait_stream(cur)
        for t in tensors:  # (bucket memory is the C layer's: not the allocator's to give out)
            if t is not None and t.is_cuda and not self._h.in_buckets(t):
                t.record_stream(self._ddp_stream)

    def _current_waits_ddp_stream(self):
        """The caller's current stream waits for the work queued on the DDP's stream (its
        results written back), before it uses them."""
        if self._cuda:
            cur = torch.cuda.current_stream(self.device)
            if cur != self._ddp_stream:
                cur.wait_stream(self._ddp_stream)

    def _current_buffers(self):
        return [b for _, b in self.module.named_buffers()]

    def _err(self, rc, what):
        msg = _lib.lib.ringlet_ddp_last_error(self._h.ptr).decode("utf-8", "replace") if self._h.ptr else ""
        return RingletError(rc, "ringlet DDP %s: %s" % (what, msg))

    def _check(self, rc, what):
        if rc:
            raise self._err(rc, what)

    def _ptr(self):
        if not self._h.ptr:
            raise RingletError(_lib.ERR_INVALID_USAGE, "ringlet DDP: the object was closed (communicator destroyed)")
        return self._h.ptr

    # ---- forward ----

    def forward(self, *inputs, **kwargs):
        h = self._ptr()
        if self._finish_pending:
            # an inner backward's end left the last iteration open and no hook came after
            # it (_inner_backward_end): it ends here, raising what it found
            self._finish_pending = False
            self._finish()
        grad = torch.is_grad_enabled()
        sync = grad and self.require_backward_grad_sync
        self._check_params()
        if self._retired_memory:
            self._free_retired(h)
        with self._on_device():
            if self._cuda:  # this forward's stream (the caller may have switched streams)
                self._check(_lib.lib.ringlet_ddp_set_stream(h, self._stream()), "set_stream")
                self._ddp_stream = self._h.stream = torch.cuda.current_stream(self.device)
            if self.broadcast_buffers and self._buffer_ptrs:
                self._refresh_buffers(h)
            # a forward without autograd (evaluation) leaves an iteration in progress alone
            mode = (_lib.DDP_SYNC if sync else _lib.DDP_NO_SYNC) if grad else _lib.DDP_NO_GRAD
            self._check(_lib.lib.ringlet_ddp_pre_forward(h, mode), "pre_forward")
        if grad:
            self._expect_hooks = sync
            # no_sync forwards: their use of a parameter counts at the next sync (as in
            # PyTorch's reducer), which find_unused_parameters needs to hear of
            self._nosync_usage = not sync and self.find_unused_parameters
        if sync:
            # a callback torch dropped (a backward that raised) is queued again
            self._callback_queued = False
            self._first_hook_time = None
            self._ready = bytearray(len(self._params))
            self._unused = set()
            self._undefined = []
            self._unused_marked = False
            self._hook_error = None
        if self._move_inputs:
            inputs, kwargs = _inputs_to(inputs, self.device), _inputs_to(kwargs, self.device)
        out = self.module(*inputs, **kwargs)
        if sync and self.find_unused_parameters:
            self._unused = set(self._find_unused(out))
        return out

    def _check_params(self):
        """The buckets were made for the parameters' sizes and dtypes at construction: a
        model converted since (model.half(), .double(), .to(device)) would reduce its
        gradients as bytes of the old dtype, or past their end."""
        for n, p, kind in zip(self._param_names, self._params, self._param_kinds):
            if (p.numel(), p.dtype, p.device) != kind:
                raise RingletError(_lib.ERR_INVALID_USAGE,
                                   "ringlet DDP: parameter %s is now %s of %d elements on %s; at construction it was "
                                   "%s of %d elements on %s (convert the model before building the DDP)"
                                   % (n, p.dtype, p.numel(), p.device, kind[1], kind[0], kind[2]))

    def _refresh_buffers(self, h):
        bufs = self._current_buffers()
        if len(bufs) != len(self._buffer_ptrs):
            raise RingletError(_lib.ERR_INVALID_USAGE,
                               "ringlet DDP: the module has %d buffers now, %d at construction"
                               % (len(bufs), len(self._buffer_ptrs)))
        for j, b in enumerate(bufs):
            # the C layer knows a buffer's place, not a new size or dtype: it would copy the
            # old number of bytes into the new memory
            if (b.numel(), b.dtype, b.device) != self._buffer_kinds[j] or not _dense(b):
                n0, t0, d0 = self._buffer_kinds[j]
                raise RingletError(_lib.ERR_INVALID_USAGE,
                                   "ringlet DDP: buffer %s is now %s%s of %d elements on %s; at construction "
                                   "it was %s of %d elements on %s (a buffer may be replaced, keeping its size, "
                                   "dtype and device: build the DDP again after such a change)"
                                   % (self._buffer_names[j], "" if _dense(b) else "a strided (non-dense) ",
                                      b.dtype, b.numel(), b.device, t0, n0, d0))
            p = b.data_ptr()
            if p != self._buffer_ptrs[j]:
                self._check(_lib.lib.ringlet_ddp_set_buffer(h, j, p), "set_buffer")
                self._buffer_ptrs[j] = p

    def _find_unused(self, out):
        """Parameters whose AccumulateGrad node the output's graph does not reach."""
        seen = set()
        reached = set()
        stack = [t.grad_fn for t in _find_tensors(out) if t.requires_grad and t.grad_fn is not None]
        while stack:
            fn = stack.pop()
            if fn in seen:
                continue
            seen.add(fn)
            var = getattr(fn, "variable", None)
            if var is not None:
                reached.add(id(var))
            for nxt, _ in fn.next_functions:
                if nxt is not None and nxt not in seen:
                    stack.append(nxt)
        # leaves the output is itself (a parameter returned as is)
        for t in _find_tensors(out):
            if t.requires_grad and t.grad_fn is None:
                reached.add(id(t))
        return [i for i, p in enumerate(self._params) if id(p) not in reached]

    # ---- backward ----

    def _hook(self, i):
        if not self._expect_hooks:
            if self._nosync_usage and self._params[i].grad is not None:
                self._check(_lib.lib.ringlet_ddp_grad_ready(self._ptr(), i, None), "no_sync usage")
            return
        try:
            self._on_grad_ready(i)
        except Exception as e:  # raised from the end-of-backward callback
            if self._hook_error is None:
                self._hook_error = e

    def _queue_callback(self):
        if not self._callback_queued:
            self._callback_queued = True
            if self._first_hook_time is None:
                self._first_hook_time = time.monotonic()
            torch.autograd.Variable._execution_engine.queue_callback(self._finish)

    def _inner_backward_end(self):
        """Whether this end of a backward is that of one run inside another's Function
        (torch.utils.checkpoint's reentrant mode, torch 1.13's default, runs its segment's
        backward so), with parameters still to come from the outer one: the callback,
        queued by a hook of the inner backward, runs at the inner one's end. It is then
        queued again by the next hook, in the outer backward. torch's DDP queues it when
        the last bucket is ready instead, which would move ringlet's error for a
        parameter that never got a gradient from backward to the next forward."""
        if all(r or j in self._unused for j, r in enumerate(self._ready)) or not _inside_function_backward():
            return False
        self._callback_queued = False
        self._finish_pending = True  # if no hook comes after it, the next forward ends it
        return True

    def _grad_ptr(self, i, unused=False):
        """Where parameter i's gradient is (None: it has none), after putting it in place.
        unused (grad_unused): a parameter with no gradient contributes zeros from its bucket
        slot, which also takes the result: ringlet writes the result into the last gradient
        it was given, which zero_grad(set_to_none=True) freed since."""
        p = self._params[i]
        g = p.grad
        if g is None and unused:
            v = self._views[i]
            v.zero_()
            return v.data_ptr() if v.numel() else None
        if self.gradient_as_bucket_view:
            v = self._views[i]
            if g is None:
                return None
            if g.data_ptr() != v.data_ptr():
                v.copy_(g)  # e.g. after zero_grad(set_to_none=True)
                p.grad = v
            return v.data_ptr() if v.numel() else None
        if g is None:
            return None
        if not g.is_contiguous() or g.dtype != p.dtype:
            g = g.contiguous().to(p.dtype)
            p.grad = g
        return g.data_ptr() if g.numel() else None

    def _mark_unused(self, h):
        self._unused_marked = True
        for j in sorted(self._unused):
            if not self._ready[j]:
                self._ready[j] = 1
                ptr = self._grad_ptr(j, unused=True)
                self._join_ddp_stream((self._params[j].grad,))
                self._check(_lib.lib.ringlet_ddp_grad_unused(h, j, ptr), "grad_unused")

    def _on_grad_ready(self, i):
        h = self._ptr()
        self._queue_callback()
        if self.find_unused_parameters and not self._unused_marked:
            self._mark_unused(h)
        self._ready[i] = 1
        p = self._params[i]
        try:
            if p.grad is not None and p.grad.is_sparse:
                raise RingletError(_lib.ERR_INVALID_USAGE,
                                   "ringlet DDP: parameter %s got a sparse gradient; only dense gradients are "
                                   "supported" % self._param_names[i])
            # autograd's gradient for it came back undefined (a Function returned None for it):
            # zeros from it, and its .grad takes the average, as in torch's DDP (left as it was,
            # the C layer would send and write the gradient of an earlier iteration, freed by
            # zero_grad(set_to_none=True))
            undefined = p.grad is None
            ptr = self._grad_ptr(i, unused=undefined)
            if undefined:
                self._undefined.append(i)
            self._join_ddp_stream((p.grad,))
        except Exception as e:
            # said to the C layer: the iteration fails on every rank (unsaid, it would fail
            # on this one only, and with find_unused_parameters the C layer would take the
            # parameter for unused and read its last gradient, freed since)
            _lib.lib.ringlet_ddp_grad_failed(h, i, str(e).encode("utf-8", "replace"))
            raise
        rc = _lib.lib.ringlet_ddp_grad_ready(h, i, ptr)
        if rc and i in self._unused:
            raise self._err(rc, "backward: parameter %s got a gradient although the forward's output does not "
                            "depend on it (find_unused_parameters counted it as unused; is it used in the loss "
                            "outside the module's forward, or inside a reentrant torch.utils.checkpoint, whose "
                            "segment the output's graph does not show? use_reentrant=False shows it)"
                            % self._param_names[i])
        self._check(rc, "backward")

    def _finish(self):
        """End of backward (autograd engine callback)."""
        if self._inner_backward_end():
            return
        with self._on_device():  # a rebuild makes new buckets
            self._finish_here()

    def _finish_here(self):
        self._callback_queued = False
        self._finish_pending = False
        undefined, self._undefined = self._undefined, []
        h = self._ptr()
        err = self._hook_error
        self._hook_error = None
        if self.find_unused_parameters:
            try:
                if not self._unused_marked:
                    self._mark_unused(h)
                for j in range(len(self._params)):  # no hook, not found by the graph walk
                    if not self._ready[j]:
                        self._ready[j] = 1
                        ptr = self._grad_ptr(j, unused=True)
                        self._join_ddp_stream((self._params[j].grad,))
                        self._check(_lib.lib.ringlet_ddp_grad_unused(h, j, ptr), "grad_unused")
            except RingletError as e:
                err = err or e
        self._join_ddp_stream()
        rc = _lib.lib.ringlet_ddp_finish(h)
        self._current_waits_ddp_stream()  # the write-backs are on the DDP's stream: the optimizer's waits
        self.backward_hook_times = (self._first_hook_time, time.monotonic())
        self._first_hook_time = None
        st = _lib.DDPStats()
        if _lib.lib.ringlet_ddp_stats(h, ctypes.byref(st)) == 0 and st.bucket_rebuilds != self._rebuilds:
            self._rebuilds = st.bucket_rebuilds
            self._after_rebuild(h)  # the results moved with the buckets
        if err is not None:
            raise err
        if rc:
            raise self._err(rc, "backward")
        for j in undefined:
            p = self._params[j]
            if p.grad is None:
                p.grad = self._views[j] if self.gradient_as_bucket_view else self._views[j].clone()
        if self.find_unused_parameters:
            used = ctypes.c_int()
            for j in range(len(self._params)):
                p = self._params[j]
                if p.grad is None:
                    self._check(_lib.lib.ringlet_ddp_param_used(h, j, ctypes.byref(used)), "param_used")
                    if used.value:  # unused here, used elsewhere: the average arrives here too
                        p.grad = self._views[j] if self.gradient_as_bucket_view else self._views[j].clone()

    # ---- no_sync, buffers, introspection ----

    @contextlib.contextmanager
    def no_sync(self):
        """Forwards inside accumulate gradients locally; the first forward after the block
        reduces the accumulated sum."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def sync_buffers(self):
        """Broadcasts the buffers from rank 0 now (collective)."""
        h = self._ptr()
        self._refresh_buffers(h)
        with self._on_device():
            self._join_ddp_stream()
            self._check(_lib.lib.ringlet_ddp_broadcast_buffers(h), "broadcast_buffers")
            self._current_waits_ddp_stream()

    @property
    def num_buckets(self):
        return len(self._bucket_tensors)

    def bucket_assignment(self):
        """Parameter names per bucket, in launch order."""
        out = [[] for _ in self._bucket_tensors]
        for i, b in enumerate(self._bucket_of):
            out[b].append(self._param_names[i])
        return out

    def bucket_trace(self):
        """Last synchronising backward: per bucket (launch order) a dict with the
        time.monotonic() values of its all-reduce's launch ('launch'), of when it was first
        seen complete ('complete': polled at each gradient report, else finish's wait) and of
        the write-back of its gradients ('done'), its size and parameters; plus
        'finish_start' (the end of backward) and 'finish_end'."""
        h = self._ptr()
        st = _lib.DDPStats()
        self._check(_lib.lib.ringlet_ddp_stats(h, ctypes.byref(st)), "stats")
        buckets = []
        for b, t in enumerate(self._bucket_tensors):
            info = _lib.DDPBucketInfo()
            self._check(_lib.lib.ringlet_ddp_bucket_info(h, b, ctypes.byref(info)), "bucket_info")
            buckets.append({"bucket": b, "launch": info.launch_time, "complete": info.complete_time,
                            "done": info.done_time,
                            "params": [self._param_names[i] for i, bi in enumerate(self._bucket_of) if bi == b],
                            "bytes": t.numel() * t.element_size(), "nparams": info.nparams})
        return {"buckets": buckets, "finish_start": st.finish_start_time, "finish_end": st.finish_end_time,
                "buckets_before_finish": st.buckets_before_finish, "iterations": st.iterations,
                "buffer_broadcasts": st.buffer_broadcasts}

    def close(self):
        """Frees the C object; gradients that were views into its buckets get memory of
        their own first (_Handle.close). Its hooks leave the parameters."""
        self._expect_hooks = False
        self._nosync_usage = False
        _remove_hooks(self._hook_handles)
        self._bucket_tensors = []
        self._views = []
        self._h.close()

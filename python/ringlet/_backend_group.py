"""The torch backend's ProcessGroup: every operation torch's collectives, DDP and ZeRO call,
each checked and launched as one or more ringlet calls (see torch_backend.py)."""
import ctypes
import weakref

import torch
from torch._C import _distributed_c10d as _c10d

from . import _backend_coalesce as _coalesce, _lib
from ._backend_tensors import (BACKEND, _L, _ProcessGroup, _Reduction, _adjacent, _as_like, _bytes, _check_dense, _contig,
                               _landing, _nbytes, _one_storage, _op_name, _ptr)
from ._backend_work import (_Core, _Launch, _close_group, _closes_window, _device_of, _live_groups, _sync_call,
                            register_abort_at_exit)


class ProcessGroupRinglet(_ProcessGroup):
    """A torch ProcessGroup over one ringlet communicator."""

    def __init__(self, handles, rank, size, timeout_s, group_name="", global_ranks=None):
        super().__init__(rank, size)
        self._core = core = _Core(handles, rank, size, timeout_s, group_name, global_ranks)
        self._rank = rank
        self._size = size
        self._group_name = core.group_name
        _live_groups.append(weakref.ref(self))
        self._finalizer = weakref.finalize(self, _close_group, core.holder, core.completer_box, timeout_s,
                                           core.children)
        register_abort_at_exit()

    @property
    def _handle(self):
        return self._core.holder[0]

    def _ddp_communicator(self):
        """A ringlet.Communicator of this group's ranks for ringlet's DDP class, split from the
        group's (collective: every rank builds its DDP at the same point): the buckets'
        all-reduces, launched from autograd's hooks, meet no torch call of the group. Made
        once, shared by the DDP objects on the group, destroyed with the group."""
        from . import Communicator
        core = self._core
        with core.mu:
            for c in core.children:
                if c._handle:
                    return c
            h = _lib.c_comm()
            rc = _L.ringlet_comm_split(self._core._live("DDP communicator"), 0, self._rank, ctypes.byref(h))
            if rc:
                raise core._make_error(rc, "splitting a communicator for ringlet's DDP", core._last_error(0))
            c = Communicator(h)
            core.children.append(c)
            return c

    # -- identity --

    def getBackendName(self):
        return BACKEND

    def _get_backend_name(self):
        return BACKEND

    def name(self):
        return BACKEND

    def __repr__(self):
        return "ProcessGroupRinglet(group %s, rank %d of %d)" % (self._group_name, self._rank, self._size)

    # torch 2.x keeps a group's name in the backends it registers on the group; a Python
    # backend's group registers none, so torch's own getter raises "ProcessGroup name not
    # set" (destroy_process_group, DeviceMesh, functional collectives read it). The group
    # keeps its name: Python callers take the property and _set_group_name, C++ callers
    # getGroupName and setGroupName (the names torch's trampoline looks up).
    def getGroupName(self):
        return self._group_name

    def setGroupName(self, name):
        self._group_name = name

    group_name = property(getGroupName)
    _set_group_name = setGroupName

    # torch 2.x asks a group for its backend of a device (init_process_group(device_id=...),
    # timeouts, splits, Inductor's time estimates); this group is its own, for CPU and CUDA.
    # It coalesces (_start_coalescing, _end_coalescing); it cannot split (torch then makes
    # subgroups with new_group), shrink, estimate a collective's time (torch then uses its
    # own formula) or allocate tensors.
    supports_splitting = False
    supports_coalescing = True
    supports_shrinking = False
    supports_time_estimate = False

    def supports_tensor_alloc(self, device):
        return False

    def _get_backend(self, device):
        dev = torch.device(device)
        if dev.type not in ("cpu", "cuda"):
            raise RuntimeError("ringlet: no backend for device type %s (ringlet serves cpu and cuda)" % dev.type)
        return self

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
        # the communicators split from it too: the finalizer's clean destroy of them is
        # collective, and would wait for a hung peer until the deadline
        for c in list(self._core.children):
            c.abort()
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
        if self._uneven(outs, inp, "input", what):
            return self._allgather_uneven(outs, inp, what, _sync_call())
        self._check_list(outs, inp, what, "output")
        dev = _device_of(outs + [inp], what)
        ln = _Launch(self._core, what, dev, sync=_sync_call())
        try:
            src = _contig(inp)
            nb = _nbytes(src)
            direct = _adjacent(outs, nb)
            dst = outs[0] if direct else torch.empty((self._size,) + tuple(inp.shape), dtype=inp.dtype, device=dev)
            ln.call(_L.ringlet_iallgather, _L.ringlet_allgather, _ptr(src), _ptr(dst) if nb else None, nb, _lib.UINT8)
            if not direct:
                def out():
                    for r, o in enumerate(outs):
                        o.copy_(dst[r].view(o.shape))
                ln.then(out)
            ln.keep += outs + [inp, src, dst]
        except BaseException as e:
            ln.abandon(e)
        return ln.work(outs)

    def _uneven(self, lst, one, one_name, what):
        """A list of tensors of several sizes, rank r's (all_gather: output; reduce_scatter:
        input) as large as rank r's one tensor (its one_name: all_gather's input,
        reduce_scatter's output), as ProcessGroupNCCL takes them (Gloo does not); this
        rank's as large as its own."""
        if len(lst) != self._size or len({t.numel() for t in lst}) == 1:
            return False  # one size (_check_list says where it differs from this rank's)
        for t in lst:
            _check_dense(t, what)
            if t.dtype != one.dtype:
                return False  # _check_list says why
        mine = lst[self._rank].numel()
        if mine != one.numel():
            raise RuntimeError("ringlet: %s: tensors of several sizes in the list, but this rank's (%d) has %d elements "
                               "and its %s %d" % (what, self._rank, mine, one_name, one.numel()))
        return True

    def _reduce_scatter_uneven(self, out, ins, opname, what, sync):
        """Block q reduced into rank q's output, one reduce per rank in rank order (NCCL's
        process group reduces to each rank in turn). sync: torch's _sync_call() (taken by
        the caller: it looks at the caller's caller)."""
        dev = _device_of(ins + [out], what)
        stage = _landing(out)
        dred = _Reduction(stage, opname, what)
        reds = [_Reduction(i, opname, what) for i in ins]
        ln = _Launch(self._core, what, dev, sync=sync)
        try:
            for q, red in enumerate(reds):
                mine = q == self._rank
                ln.call(_L.ringlet_ireduce, _L.ringlet_reduce, _ptr(red.buf) if red.buf.numel() else None,
                        _ptr(dred.buf) if mine and dred.buf.numel() else None, red.buf.numel(), red.code, red.op, q)
            if dred.fix is not None:
                ln.then(dred.finish)
            if stage is not out:
                ln.then(lambda: out.copy_(stage))
            ln.keep += ins + [out, stage, dred.buf] + [r.buf for r in reds]
        except BaseException as e:
            ln.abandon(e)
        return ln.work([out])

    def _allgather_uneven(self, outs, inp, what, sync):
        """Each rank's input to every rank, as sends and receives of its bytes (NCCL's
        process group broadcasts from each rank in turn). sync: as _reduce_scatter_uneven's."""
        dev = _device_of(outs + [inp], what)
        ln = _Launch(self._core, what, dev, sync=sync)
        try:
            src = _bytes(inp)
            dsts = [_landing(o) for o in outs]
            dbytes = [_bytes(d) for d in dsts]
            self._exchange(ln, [src] * self._size, dbytes)
            for o, d in zip(outs, dsts):
                if d is not o:
                    ln.then(lambda o=o, d=d: o.copy_(d))
            ln.keep += outs + [inp, src] + dsts + dbytes
        except BaseException as e:
            ln.abandon(e)
        return ln.work(outs)

    def _allgather_base(self, output, input, opts=None):
        what = "_allgather_base (all_gather_into_tensor)"
        self._check_gather_pair(output, input, what)
        dev = _device_of((output, input), what)
        ln = _Launch(self._core, what, dev, sync=_sync_call())
        try:
            self._allgather_into(ln, output, input)
        except BaseException as e:
            ln.abandon(e)
        return ln.work([output])

    def _check_gather_pair(self, output, input, what):
        self._check_pair(output, "output", input, "input", what)

    def _check_pair(self, big, big_name, small, small_name, what):
        """big must hold the group's size x small's elements, of small's dtype."""
        _check_dense(big, what)
        _check_dense(small, what)
        if big.dtype != small.dtype or big.numel() != small.numel() * self._size:
            raise RuntimeError("ringlet: %s: %s has %d elements of %s, %s %d of %s; the %s must hold %d x the %s's "
                               "elements, of its dtype" % (what, big_name, big.numel(), big.dtype, small_name,
                                                          small.numel(), small.dtype, big_name, self._size,
                                                          small_name))

    def _allgather_into(self, ln, output, input):
        """Every rank's input, in rank order, into output (size x its elements)."""
        src = _contig(input)
        dst = _landing(output)
        nb = _nbytes(src)
        ln.call(_L.ringlet_iallgather, _L.ringlet_allgather, _ptr(src), _ptr(dst), nb, _lib.UINT8)
        if dst is not output:
            ln.then(lambda: output.copy_(dst))
        ln.keep += (output, input, src, dst)

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
            ln.keep += [src, dst] + input_list + [o for lst in output_lists for o in lst]
        except BaseException as e:
            ln.abandon(e)
        return ln.work([o for lst in output_lists for o in lst])

    def _reduce_scatter_into(self, what, out, src, opname, ln):
        """src (contiguous, size x out's elements) reduced and scattered into out."""
        red = _Reduction(src, opname, what)
        stage = _landing(out)
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
        opname = _op_name(opts.reduceOp) if opts is not None else "SUM"
        if self._uneven(ins, out, "output", what):
            return self._reduce_scatter_uneven(out, ins, opname, what, _sync_call())
        self._check_list(ins, out, what, "input")
        dev = _device_of(ins + [out], what)
        ln = _Launch(self._core, what, dev, sync=_sync_call())
        try:
            if _adjacent(ins, _nbytes(out)) and _one_storage(ins):  # chunks of one tensor: one buffer already
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
        self._check_scatter_pair(output, input, what)
        opname = _op_name(opts.reduceOp) if opts is not None else "SUM"
        dev = _device_of((output, input), what)
        ln = _Launch(self._core, what, dev, sync=_sync_call())
        try:
            self._reduce_scatter_into(what, output, _contig(input).reshape(-1), opname, ln)
        except BaseException as e:
            ln.abandon(e)
        return ln.work([output])

    def _check_scatter_pair(self, output, input, what):
        self._check_pair(input, "input", output, "output", what)

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
            dst = _landing(output)
            if even:
                rows_in = input.shape[0] if input.dim() else 1
                rows_out = output.shape[0] if output.dim() else 1
                if rows_in % P or rows_out % P or output.numel() != input.numel():
                    raise RuntimeError("ringlet: %s: without split sizes, input and output must hold the same number "
                                       "of elements (%d, %d) and split evenly along dim 0 (%d and %d rows) among %d "
                                       "ranks" % (what, input.numel(), output.numel(), rows_in, rows_out, P))
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
            dsts = [_landing(o) for o in outs]
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
            staged = me == root and not _adjacent(outs, nb)
            if me == root:
                dst = torch.empty((self._size,) + tuple(inp.shape), dtype=inp.dtype, device=dev) if staged else outs[0]
            ln.call(_L.ringlet_igather, _L.ringlet_gather, _ptr(src), _ptr(dst) if dst is not None else None, nb,
                    _lib.UINT8, root)
            if staged:
                def out():
                    for r, o in enumerate(outs):
                        o.copy_(dst[r].view(o.shape))
                ln.then(out)
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
            dst = _landing(out)
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
        # The blocking form completes the earlier collectives first, their copies out of
        # staging included, as Gloo's barrier waits for all earlier work: a program may read
        # an async_op's output after a barrier without waiting for it (their Works still
        # report to wait and test). The async form does not wait here (the caller may have
        # to send something first).
        # On CUDA the earlier collectives' work (their copies out of staging; with
        # RINGLET_STREAM_HOLD, all of it) is on the group's streams: the current streams wait
        # for them, and the blocking form waits for those on the host, as ProcessGroupNCCL's
        # barrier does.
        sync = _sync_call()
        if sync:
            self._core.finish_earlier()
        current = self._core.streams_after_collectives()
        ln = _Launch(self._core, "barrier", torch.device("cpu"), sync=sync)
        try:
            ln.call(_L.ringlet_ibarrier, _L.ringlet_barrier)
        except BaseException as e:
            ln.abandon(e)
        w = ln.work([])
        if sync:
            for s in current:
                s.synchronize()
        return w

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
            b = _landing(t)
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

    # torch 2.x's coalescing (_backend_coalesce.py)
    _start_coalescing = _coalesce.start_coalescing
    _end_coalescing = _coalesce.end_coalescing
    allgather_into_tensor_coalesced = _coalesce.allgather_into_tensor_coalesced
    reduce_scatter_tensor_coalesced = _coalesce.reduce_scatter_tensor_coalesced

    # newer torch's names (its trampoline looks up all_gather_single and
    # reduce_scatter_single with no fallback to the old names)
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base
    all_to_all_single = alltoall_base
    start_coalescing = _start_coalescing
    end_coalescing = _end_coalescing

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
        receives posted at once (host), or one group (device). Sends first: on host memory
        each call is posted in turn, and a receive from a rank this one has no connection
        from waits (TCP, IB) for that rank to connect, which it does at its first send to
        this rank: receives first, each rank would wait for one still in its own receives."""
        me = self._rank
        ln.sync = False  # every send and receive posted at once, whatever torch does next
        if recvs[me].numel() != sends[me].numel():
            raise RuntimeError("ringlet: %s: this rank sends itself %d bytes but expects %d"
                               % (ln.what, sends[me].numel(), recvs[me].numel()))
        if recvs[me].numel():
            recvs[me].copy_(sends[me])
        ln.group_start()
        for q in range(self._size):
            if q != me and sends[q].numel():
                ln.call(_L.ringlet_isend, _L.ringlet_send, _ptr(sends[q]), sends[q].numel(), _lib.UINT8, q)
        for q in range(self._size):
            if q != me and recvs[q].numel():
                ln.call(_L.ringlet_irecv, _L.ringlet_recv, _ptr(recvs[q]), recvs[q].numel(), _lib.UINT8, q)
        ln.group_end()


# A call that raises inside a coalescing block closes the thread's window (_drop_window). Every
# public method is wrapped, and torch's two underscored operations, so that a new operation
# cannot be missed (for the others, a raise closing the window is as right).
for _name, _fn in list(vars(ProcessGroupRinglet).items()):
    if callable(_fn) and _name not in ("start_coalescing", "end_coalescing") and (
            not _name.startswith("_") or _name in ("_allgather_base", "_reduce_scatter_base")):
        setattr(ProcessGroupRinglet, _name, _closes_window(_fn))

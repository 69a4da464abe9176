"""torch 2.x's coalescing, as ProcessGroupRinglet's methods: _start_coalescing and
_end_coalescing (torch's _coalescing_manager) and the fast paths it calls in between,
allgather_into_tensor_coalesced and reduce_scatter_tensor_coalesced.

torch 2.x's _coalescing_manager (batch_isend_irecv on CUDA tensors, and the coalesced
all_reduce, all_gather_into_tensor and reduce_scatter_tensor) brackets calls with
these, and returns the Work of _end_coalescing in place of theirs: it covers every
operation launched in between. On CUDA tensors (NCCL-style) the calls go into one
ringlet group, which runs them at once at the end (device sends and receives outside a
group run one by one, in order, so two ranks that both send first would wait for each
other, as with NCCL); what must follow a call on its stream (copies out of staging) is
queued after the group. CPU tensors need no group (host calls are posted and overlap).
torch 1.13 calls _start_coalescing() and _end_coalescing(its list of Works). A ringlet group
is the calling thread's, so the window is too (_Window): it opens at the first CUDA launch
of the thread after _start_coalescing, whatever the process group. A call of the group
that raises inside the window closes it (torch 2.x's manager then raises on without
_end_coalescing), and so does the next block of the same group after an error raised by
torch or by the caller inside one; a block of another group inside it nests.
"""
import datetime
import time

import torch

from ._backend_tensors import _contig, _failed_future, _op_name
from ._backend_work import (_CudaWork, _Launch, _Window, _Work, _close_window, _device_of, _drop_window, _set_window,
                            _window)


def start_coalescing(self, device=None):
    win = _window()
    if win is not None and win.core is not self._core:  # inside another group's block: its end runs both
        win.marks.append(len(win.works))
        return
    if win is not None:  # this group's block left open (torch raised on inside it): it runs now
        _drop_window()
    _set_window(_Window(self._core))


def end_coalescing(self, device=None, reqs=None):
    """torch 2.x passes the device (2.0 also its list of Works), 1.13 its list of Works;
    torch 1.13 and 2.0 return those Works, not this one, which then keeps no tensors."""
    core = self._core
    legacy = isinstance(device, list) or reqs is not None
    win = _window()
    if win is None:  # nothing was launched (or a failed call closed the window)
        return _JoinedWork(core, "coalesced operations", [], [])
    if win.marks:  # an inner block: its calls run at the outer block's end
        works = win.works[win.marks.pop():]
        outputs = [] if legacy else [t for w in works for t in w._outs(strict=False)]
        return _JoinedWork(core, "coalesced operations", works, outputs)
    _set_window(None)
    works = win.works
    outputs = [] if legacy else [t for w in works for t in w._outs(strict=False)]
    if win.device is None:  # host calls only: posted already; wait for them all
        return _JoinedWork(core, "coalesced operations", works, outputs)
    host = [w for w in works if not isinstance(w, _CudaWork)]  # launched before the window's first CUDA one
    ln = _Launch(core, "coalesced operations", win.device, p2p=True)
    try:
        rc = _close_window(win)
        if rc:
            raise core._make_error(rc, ln.what, core._last_error(1))
        for s in {id(w._stream): w._stream for w in works if isinstance(w, _CudaWork)}.values():
            if s != ln.stream:
                ln.stream.wait_stream(s)
    except BaseException as e:
        ln.abandon(e)
    w = ln.work(outputs)  # win.keep goes at the return, now that the calls that use it are queued
    return _JoinedWork(core, "coalesced operations", host + [w], outputs) if host else w


def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
    """torch 2.x's coalesced all_gather_into_tensor (_coalescing_manager): one all-gather
    per pair, all in one Work."""
    what = "allgather_into_tensor_coalesced"
    outputs, inputs = _check_pairs(outputs, inputs, what)
    for o, i in zip(outputs, inputs):
        self._check_gather_pair(o, i, what)
    dev = _device_of(outputs + inputs, what)
    ln = _Launch(self._core, what, dev)
    try:
        for o, i in zip(outputs, inputs):
            self._allgather_into(ln, o, i)
    except BaseException as e:
        ln.abandon(e)
    return ln.work(outputs)


def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
    """torch 2.x's coalesced reduce_scatter_tensor (_coalescing_manager): one
    reduce-scatter per pair, all in one Work."""
    what = "reduce_scatter_tensor_coalesced"
    outputs, inputs = _check_pairs(outputs, inputs, what)
    for o, i in zip(outputs, inputs):
        self._check_scatter_pair(o, i, what)
    opname = _op_name(opts.reduceOp) if opts is not None else "SUM"
    dev = _device_of(outputs + inputs, what)
    ln = _Launch(self._core, what, dev)
    try:
        for o, i in zip(outputs, inputs):
            self._reduce_scatter_into(what, o, _contig(i).reshape(-1), opname, ln)
    except BaseException as e:
        ln.abandon(e)
    return ln.work(outputs)


def _check_pairs(outputs, inputs, what):
    outputs, inputs = list(outputs), list(inputs)
    if len(outputs) != len(inputs) or not outputs:
        raise RuntimeError("ringlet: %s: %d output tensors and %d inputs; one output per input, at least one"
                           % (what, len(outputs), len(inputs)))
    return outputs, inputs


class _JoinedWork(_Work):
    """The Work of _end_coalescing: done when every Work launched while coalescing is
    (torch 2.x returns it in place of theirs)."""

    def __init__(self, pg, what, works, outputs):
        super().__init__()
        self._pg = pg
        self._what = what
        self._works = list(works)
        self._outputs = outputs
        self._seen = False

    def _seen_done(self):
        if not self._seen:
            self._seen = True
            self._pg._retire(self)

    def wait(self, timeout=None):
        limit = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else (timeout or 0)
        until = time.monotonic() + limit if limit > 0 else None
        for w in self._works:  # each raises its own failure, naming its operation
            w.wait(None if until is None else max(1e-6, until - time.monotonic()))
        self._seen_done()
        return True

    def is_completed(self):
        if all(w.is_completed() for w in self._works):
            self._seen_done()
            return True
        return False

    def is_success(self):
        return self.is_completed() and all(w.is_success() for w in self._works)

    def exception(self):
        for w in self._works:
            e = w.exception()
            if e is not None:
                return e
        return None

    def get_future(self):
        try:
            outs = self._outs()
        except RuntimeError as e:  # asked for after the group let go and the program dropped them
            return _failed_future(e)

        def joined(f):
            for g in f.value():
                g.wait()  # raises a failed one's error: the joined future fails with it
            return outs
        self._seen_done()
        return torch.futures.collect_all([w.get_future() for w in self._works]).then(joined)

    def synchronize(self):
        self.wait()

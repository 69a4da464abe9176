"""The torch backend's Works and launches: CPU Works as Gloo's (requests, a completion
thread per communicator of the group for futures, deliverer threads for their callbacks), CUDA Works as NCCL's (an event on the group's stream), the
launch that issues one operation's ringlet calls, and a group's shared state (_Core)."""
import atexit
import collections
import ctypes
import datetime
import os
import sys
import threading
import time
import weakref

import torch

from . import _lib, RingletError
from ._backend_tensors import _Failed, _L, _TorchWork, _check_dense, _failed_future, _future


class _Work(_TorchWork):
    """What the backend's Works share: the outputs, and no receive from any source."""

    def result(self):
        self.wait()
        return self._outs()

    def _let_go(self):
        """The group keeps this Work a while after its completion was seen (or once it is
        among those never waited for), for torch's C++ code only: its outputs are then
        held weakly, so that tensors the program dropped are freed at once, as NCCL's Work
        lets go of them once done, not after 32 (or 4096) later operations. (On CUDA the
        stream still keeps what it uses: record_stream.)"""
        outs = self._outputs
        if outs and not isinstance(outs, _WeakOutputs):
            self._outputs = _WeakOutputs(outs)
        # A future made already holds them as its value: let go of once complete (one still
        # being completed by a deliverer thread, which wait() waits for, when it is); one
        # asked for later is made anew, from the weak outputs. Whoever holds it keeps it.
        fut, user = getattr(self, "_fut", None), getattr(self, "_user_fut", None)
        last = user if user is not None else fut
        if last is None or last.done():
            self._drop_futures()
        else:
            me = weakref.ref(self)
            last.add_done_callback(lambda _f: _drop_futures_of(me()))

    def _drop_futures(self):
        lock = getattr(self, "_lock", None)  # a CPU Work's: get_future reads both under it
        if lock is not None:
            lock.acquire()
        try:
            fut, user = getattr(self, "_fut", None), getattr(self, "_user_fut", None)
            if fut is not None and fut.done() and (user is None or user.done()):
                self._fut = None
                if user is not None:
                    self._user_fut = None
        finally:
            if lock is not None:
                lock.release()

    def _let_go_done(self):
        """Whether the group has let go of this Work's outputs (_let_go)."""
        return isinstance(self._outputs, _WeakOutputs)

    def _outs(self, strict=True):
        """The outputs as a list (result(), a future asked for late); once let go of, those
        the program still holds (strict: an error where one is freed)."""
        outs = self._outputs
        if isinstance(outs, _WeakOutputs):
            return outs.get(self._what, strict)
        return list(outs)

    def source_rank(self):
        raise RuntimeError("ringlet: source_rank(): ringlet does not receive from any source (recv needs src)")

    _source_rank = source_rank


def _drop_futures_of(w):
    if w is not None:
        w._drop_futures()


class _WeakOutputs:
    """A Work's outputs held weakly (_Work._let_go)."""

    __slots__ = ("_refs",)

    def __init__(self, outs):
        self._refs = [weakref.ref(t) for t in outs]

    def get(self, what, strict=True):
        outs = [r() for r in self._refs]
        if not strict:
            return [t for t in outs if t is not None]
        if any(t is None for t in outs):
            raise RuntimeError("ringlet: %s: its output tensors were freed after the operation ended (the program "
                               "no longer held them), so result() cannot return them" % what)
        return outs


class _CpuWork(_Work):
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
        self._deliver = None  # set by the completion thread: runs the future's set_result elsewhere
        self._let_go_later = False  # the group let go of it while it ran (_let_go)

    # -- completion --

    def _run_requests(self, block):
        """Waits for (block) or tests the requests; the caller owns them. True once all are done."""
        reqs = self._reqs
        if not self._pg.holder[self._ci]:  # its own communicator: send/recv's goes first
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
            fut, ev, outs, later = self._fut, self._done_ev, self._outputs, self._let_go_later
        if fut is not None:
            value = outs if err is None else _Failed(err)
            if self._deliver is not None:
                self._deliver(fut, value)
            else:
                fut.set_result(value)
        if later:
            _Work._let_go(self)
        if ev is not None:
            ev.set()

    def _let_go(self):
        with self._lock:
            if not self._state:  # ringlet still writes its outputs: let go of them once it is done
                self._let_go_later = True
                return
        _Work._let_go(self)

    def _release(self):
        """Gives the requests back after a test that found them running. A future asked for
        meanwhile (get_future found them owned) goes to the completion thread now, and
        threads waiting in wait() for the tester wake up to take them."""
        with self._lock:
            hand = self._fut is not None and not self._state
            self._owner = hand
            ev = None
            if not hand and self._done_ev is not None:
                ev, self._done_ev = self._done_ev, None
        if hand:
            self._pg._completer(self._ci).add(self)
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
        self._finish()
        user = self._user_fut
        if self._deliver is not None and user is not None:
            # its future is completed by a deliverer thread: done before wait() returns, as
            # Gloo's is (a caller may read get_future().value() next)
            try:
                user.wait()
            except Exception:  # noqa: BLE001  (the failure is raised below)
                pass
        self._seen_done()
        if self._state == 2:
            raise self._err
        return True

    def _finish(self):
        """Blocks until the requests are done and the copies out of staging have run."""
        while not self._state:
            mine, ev = self._take()
            if mine:
                self._run_requests(True)
            elif ev is not None:
                ev.wait()  # the owner's ringlet_wait returns within ringlet's deadline; a tester's
                # test returns at once (and it sets the event when it gives them back)

    def is_completed(self):
        if not self._state:
            mine, _ = self._take()
            if mine and not self._run_requests(False):
                self._release()
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
            fut, user = self._fut, self._user_fut
        if new and state == 1:
            try:
                value = self._outs()
            except RuntimeError as e:  # asked for after the program dropped the outputs
                value = _Failed(e)
            fut.set_result(value)
        elif new and state == 2:
            fut.set_result(_Failed(self._err))
        elif hand:
            self._pg._completer(self._ci).add(self)
        if state:
            # done: retired (may let go of self._user_fut); one still running stays tracked,
            # so that a barrier waits for it and its copies out of staging (Gloo's does)
            self._seen_done()
        if new and self._let_go_done():
            self._drop_futures()  # made after the group let go: not kept (it holds the outputs)
        return user

    def synchronize(self):
        pass


class _CudaWork(_Work):
    """An operation on CUDA tensors, queued on the group's stream for the device: an
    event recorded after it is what wait() and the future synchronise with."""

    def __init__(self, pg, what, device, stream, event, outputs):
        super().__init__()
        self._pg = pg
        self._what = what
        self._device = device
        self._stream = stream
        self._event = event
        self._outputs = outputs
        self._fut = None
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
        """Makes the current stream wait for the operation; with a timeout (a timedelta or
        seconds, > 0), also waits for it on the host and raises RuntimeError once the
        timeout has passed (the operation goes on), as ProcessGroupNCCL's wait does."""
        torch.cuda.current_stream(self._device).wait_event(self._event)
        limit = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else (timeout or 0)
        if limit > 0:
            until = time.monotonic() + limit
            nap = 1e-5
            while not self._event.query():
                if self._pg._async_error(self._what) is not None:
                    break  # raised by _check below
                if time.monotonic() >= until:
                    raise RuntimeError("ringlet: %s: wait timed out after %g s (the operation goes on)"
                                       % (self._what, limit))
                time.sleep(nap)
                nap = min(nap * 2, 1e-3)
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
        fut = self._fut
        if fut is None:  # made at the first ask: a coalesced call's is queued at the window's end
            try:
                value = self._outs()
            except RuntimeError as e:  # asked for after the group let go and the program dropped them
                return _failed_future(e)
            with torch.cuda.stream(self._stream):  # the future's events: recorded on the group's stream
                fut = torch.futures.Future(devices=[self._device])
                fut.set_result(value)
            if not self._let_go_done():  # made after the group let go: not kept (it holds the outputs)
                self._fut = fut
        self._seen_done()  # (lets go of self._fut)
        return fut

    def result(self):
        return self._outs()

    def synchronize(self):
        self.wait()


class _Deliverer:
    """Threads that complete the futures (set_result runs the then() callbacks inline). A
    callback may wait for another operation's future, as torch's PowerSGD hook does: the
    completion thread must not run it, or that future would never be completed; and a
    delivery that finds every thread here inside such a callback starts another thread."""

    IDLE_EXIT_S = 5.0  # a thread beyond the first leaves after this long without work

    def __init__(self, name):
        self._name = name
        self._q = collections.deque()
        self._cv = threading.Condition()
        self._idle = 0
        self._threads = []
        self._stop = False

    def __call__(self, fut, value):
        with self._cv:
            self._q.append((fut, value))
            if self._idle > len(self._q) - 1:
                self._cv.notify()
                return
            t = threading.Thread(target=self._run, name="%s-%d" % (self._name, len(self._threads)), daemon=True)
            self._threads = [x for x in self._threads if x.is_alive() or x.ident is None] + [t]
        t.start()

    def _run(self):
        while True:
            with self._cv:
                self._idle += 1
                while not self._q and not self._stop:
                    if not self._cv.wait(self.IDLE_EXIT_S) and not self._q and len(self._threads) > 1:
                        break
                self._idle -= 1
                if not self._q:
                    self._threads = [x for x in self._threads if x is not threading.current_thread()]
                    return
                fut, value = self._q.popleft()
            fut.set_result(value)
            del fut, value

    def stop(self, until):
        with self._cv:
            self._stop = True
            self._cv.notify_all()
            threads = list(self._threads)
        for t in threads:
            t.join(max(0.0, until - time.monotonic()))


class _Completer:
    """A completion thread of the process group: waits, oldest first, for the operations
    whose futures were asked for, and hands the completed futures to the deliverer. One per
    communicator of the group (collectives, sends and receives): a receive whose sender is
    late holds up no collective's future. ringlet_wait, not a test: it also moves a
    message posted by a thread that is waiting for nothing, and keeps its deadline."""

    def __init__(self, core, ci):
        self._q = collections.deque()
        self._cv = threading.Condition()
        self._stop = False
        name = "%s-%d" % (core.group_name, ci)
        self._deliver = _Deliverer("ringlet-future-%s" % name)
        self._thread = threading.Thread(target=self._run, name="ringlet-completion-%s" % name, daemon=True)
        self._thread.start()

    def add(self, work):
        work._deliver = self._deliver
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

    def stop(self, until):
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._thread.join(max(0.0, until - time.monotonic()))
        self._deliver.stop(until)
        return not self._thread.is_alive()


# ---- launching one operation ----

class _Window:
    """A coalescing window (torch's _start_coalescing to _end_coalescing) open on this
    thread; see _backend_coalesce.py. A ringlet group is the thread's, over every
    communicator, so the window is too: it covers every launch this thread makes in it.
    A block of another process group inside it nests, as NCCL's groups do: only the
    outermost end runs the group. A new block of the group that opened it means that block
    was left open (torch raised on inside it, without _end_coalescing): it is closed."""

    __slots__ = ("core", "device", "works", "after", "keep", "marks")

    def __init__(self, core):
        self.core = core  # the core of the process group whose block opened it
        self.device = None  # the CUDA device once a launch on one has opened the ringlet group
        self.works = []  # the Works launched in it
        self.after = []  # (stream, fn): steps that follow a call recorded in the ringlet group
        self.keep = []  # what those calls use, kept until the group has queued them
        self.marks = []  # for each inner block open, where its Works start in works


_tls = threading.local()


def _window():
    return getattr(_tls, "window", None)


def _set_window(w):
    _tls.window = w


def _close_window(win):
    """Ends a window's ringlet group, if its CUDA launches opened one: the calls recorded
    are queued (run), then the steps that follow them, and each call's own Work is done
    when the call is (its event recorded again). Returns group_end's result."""
    if win.device is None:
        return 0
    rc = _L.ringlet_group_end()
    if not rc:
        for stream, fn in win.after:
            with torch.cuda.stream(stream):
                fn()
        for w in win.works:
            if isinstance(w, _CudaWork):
                w._event.record(w._stream)
    return rc


def _drop_window():
    """A call failed inside a block: torch 2.x then raises on without _end_coalescing, so the
    window is closed here (what it recorded runs) rather than keep recording this thread's
    calls, which would never run."""
    win = _window()
    if win is not None:
        _set_window(None)
        try:
            _close_window(win)
        except Exception:  # noqa: BLE001 (the call's own error is the one to raise)
            pass


class _Launch:
    """Collects one operation's ringlet calls: non-blocking on CPU tensors (a request
    each), stream-ordered on CUDA tensors (the group's stream for the device)."""

    __slots__ = ("pg", "what", "device", "stream", "reqs", "finish", "keep", "_ctx", "_group", "ci", "sync", "_calls",
                 "_early")

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
        self._calls = 0
        self._early = False  # a then() before any call()
        self.stream = None
        win = _window()
        if win is not None and win.device is not None and device.type != "cuda":
            _drop_window()
            raise RuntimeError("ringlet: %s: %s tensors inside a coalescing block that holds CUDA operations (they "
                               "run as one group at its end): issue it before or after the block" % (what, device.type))
        if device.type == "cuda":
            if win is not None and win.device is None:  # the window's first CUDA launch: one group from here on
                _L.ringlet_group_start()
                win.device = device
            side = pg._side_stream(device, self.ci)
            side.wait_stream(torch.cuda.current_stream(device))
            self.stream = side
            self._ctx = torch.cuda.stream(side)
            self._ctx.__enter__()
        elif device.type != "cpu":
            raise RuntimeError("ringlet: %s: %s tensors are not supported (CPU and CUDA are)" % (what, device.type))

    def call(self, nb_fn, b_fn, *args):
        if self._early:  # on CUDA it would have been queued before the call: a bug of the backend's
            raise RuntimeError("ringlet: internal error: %s: a step that must follow the operation was given "
                               "before its call" % self.what)
        self._calls += 1
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
        """fn runs once the operation is done (CPU), or is queued after it (CUDA); given after
        the operation's calls. Inside a coalescing window (CUDA) the calls are queued only at
        its end, so fn waits for _end_coalescing. fn runs without autograd: its copies go
        into the caller's tensors, a parameter (a leaf that requires grad) among them, as
        Gloo's do; and grad mode is per thread, so the caller's no_grad would not reach the
        completion thread."""
        inner = fn

        def fn():
            with torch.no_grad():
                inner()
        self._early = self._early or not self._calls
        win = _window()
        if self.stream is None:
            self.finish.append(fn)
        elif win is not None and win.device is not None:
            win.after.append((self.stream, fn))
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
        win = _window()
        if win is not None:  # covered by the Work of _end_coalescing
            win.works.append(w)
            if self.stream is not None:
                win.keep.append(self.keep)  # temporaries too: their calls are queued at group_end
        return w

    def abandon(self, exc):
        """The operation failed part-way: what was issued is waited for, then exc raised."""
        if self._group:
            self._group = False
            _L.ringlet_group_end()
        _drop_window()
        for r in self.reqs:
            if r:
                _L.ringlet_wait(ctypes.byref(r))
        if self.stream is not None and self._calls:
            # calls queued on the group's stream (with RINGLET_STREAM_HOLD, not yet run) use
            # tensors this launch lets go of now: their memory must not be reused before
            # (the holds end at the latest at ringlet's deadline)
            self.stream.synchronize()
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
    while f is not None and f.f_code in _TRANSPARENT:
        f = f.f_back
    return f is not None and f.f_code.co_filename.endswith(_C10D_FILE) and f.f_locals.get("async_op") is False


_TRANSPARENT = set()  # the code of wrappers between torch and the group's methods (_closes_window)


def _closes_window(method):
    """method, closing this thread's coalescing window when it raises (_drop_window)."""
    def guarded(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            _drop_window()
            raise
    guarded.__name__, guarded.__doc__, guarded.__wrapped__ = method.__name__, method.__doc__, method
    _TRANSPARENT.add(guarded.__code__)
    return guarded


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
        self.completer_box = [None, None]  # completion threads, per communicator
        self.children = []  # ringlet.Communicators split from it (ringlet's DDP class), closed first
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
        self.track_mu = threading.Lock()

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

    def _completer(self, ci):
        c = self.completer_box[ci]
        if c is None:
            with self.mu:
                if self.completer_box[ci] is None:
                    self.completer_box[ci] = _Completer(self, ci)
                c = self.completer_box[ci]
        return c

    def _side_stream(self, device, ci=0):
        """The group's stream on device for its collectives (ci 0) or its sends and
        receives (1), as NCCL's process group has streams of its own for each (one:
        threads launching at once must not make two)."""
        s = self.sides.get((device.index, ci))
        if s is None:
            with self.mu:
                s = self.sides.get((device.index, ci))
                if s is None:
                    s = self.sides[(device.index, ci)] = torch.cuda.Stream(device)
        return s

    def streams_after_collectives(self):
        """Makes the current stream of each device the group's collectives ran on wait for
        the group's stream there (barrier); returns those current streams."""
        current = []
        for (index, ci), side in list(self.sides.items()):
            if ci == 0:
                s = torch.cuda.current_stream(torch.device("cuda", index))
                s.wait_stream(side)
                current.append(s)
        return current

    def _track(self, w):
        # Works never waited for: completed here (their staging freed) once done, and
        # kept a while (torch's C++ code may still wait on one). The oldest one still
        # running is tested outside the lock: completing it may run a future's callbacks,
        # which may launch (and so come here) again.
        test = None
        with self.track_mu:  # threads launching on one group, and _retire
            tr = self.tracked
            tr.append(w)
            for _ in range(2):
                if not tr:
                    break
                old = tr[0]
                if old._seen:
                    tr.popleft()
                elif old is not w and isinstance(old, _CpuWork) and old._state == 0 and not old._owner:
                    test = old
                    break
                elif old is not w and (not isinstance(old, _CpuWork) or old._state):
                    tr.popleft()
                    old._let_go()
                    self.unwaited.append(old)
                else:
                    break
        if test is not None:
            mine, _ = test._take()
            if mine and not test._run_requests(False):
                test._release()

    def finish_earlier(self):
        """Completes every collective on CPU tensors launched so far and not yet completed
        (waits for it, then runs its copies out of staging); errors stay with the Works.
        Not sends and receives, as Gloo's barrier (a receive may wait for a send its peer
        makes after the barrier)."""
        with self.track_mu:
            works = [w for w in self.tracked if isinstance(w, _CpuWork) and w._ci == 0]
        for w in works:
            w._finish()

    def _retire(self, w):
        with self.track_mu:
            try:
                self.tracked.remove(w)
            except ValueError:
                pass
            w._let_go()
            self.seen.append(w)


_exit_hook = []  # abort_at_exit, once registered


def register_abort_at_exit():
    """Called by each group once its finalizer exists: registers abort_at_exit (once) after
    weakref's own exit hook, which the first finalizer registered, so that it runs before
    that hook finalizes the groups (atexit runs the last registered first)."""
    if not _exit_hook:
        _exit_hook.append(abort_at_exit)
        atexit.register(abort_at_exit)


def abort_at_exit():
    """At exit on an uncaught exception: aborts the communicators of every live group and
    their children first, so that a peer waiting for this rank in a collective fails at
    once, naming it (a clean destroy, which the finalizers make, tells the peers this rank
    left in good order, and such a peer waited out the deadline); the finalizers then free
    them (a destroy after an abort waits for no peer)."""
    from . import _exiting_on_error
    if not _exiting_on_error():
        return
    for ref in reversed(_live_groups):
        pg = ref()
        core = getattr(pg, "_core", None) if pg is not None else None
        if core is None:
            continue
        for h in core.holder:
            if h:
                _L.ringlet_comm_abort(h)
        for c in list(core.children):
            c.abort()


def _close_group(holder, completer_box, timeout_s, children=()):
    """Finalizer of a process group (shutdown(), garbage collection, or exit, newest group
    first): lets the completion thread finish what it holds, destroys the communicators
    split from the group's (with the DDP objects on them), then the group's."""
    for c in list(children):
        try:
            c.destroy()
        except Exception:  # noqa: BLE001  (a failed peer: the group's own destroy reports it)
            c.abort()
    until = time.monotonic() + timeout_s + 5
    for c in completer_box:
        if c is not None:
            c.stop(until)
    for i in reversed(range(len(holder))):  # send/recv's first, the same on every rank
        h = holder[i]
        holder[i] = None
        if h:
            _L.ringlet_comm_destroy(h)

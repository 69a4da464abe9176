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
device, one for collectives and one for send/recv) that first waits for torch's current
stream. By default (RINGLET_STREAM_HOLD unset) the host then waits for the operation
before the call returns, async_op=True too; with RINGLET_STREAM_HOLD=memop|kernel it
returns at once, as NCCL's does (README, Holding streams). So, by default, an irecv
whose send the peer makes only after a collective this rank calls next waits until the
deadline, where NCCL's returns: post such pairs with batch_isend_irecv. wait()
makes the then current stream wait for the work (wait(timeout) also waits for it on the
host, raising once the timeout passed, as NCCL's does); barrier() makes the current
stream wait for the group's earlier collectives; get_future()'s future is complete at once
and makes the streams of its consumers wait; is_completed() says whether the GPU has
finished it. Tensors are kept (record_stream) until the stream is done with them.

Keeping Works alive: torch's C++ code may hold a Work after Python dropped it, and calls
its wait() through the trampoline, which only reaches Python while the Python object
lives. So the group keeps every Work until its completion has been seen through wait(),
get_future() or is_completed() (and the last 32 seen a while longer); a Work nobody ever
waits for is completed by the group at a later call and kept among the last 4096 such.
Those it keeps hold their output tensors (and a completed future's value) weakly: a tensor
the program drops is freed at once, as with NCCL, and result() of such a Work says so.
"""
import ctypes
import datetime
import os

import torch
import torch.distributed as dist

from . import _lib, RingletError
from ._backend_tensors import BACKEND, _L
from ._backend_work import _live_groups
from ._backend_group import ProcessGroupRinglet
from . import _backend_p2p

__all__ = ["ProcessGroupRinglet", "register", "BACKEND"]


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
    _backend_p2p.install()
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

"""torch's batch_isend_irecv, for ringlet's groups: the operations in one coalescing block.

newer torch (2.x) coalesces a batch (its _coalescing_manager: _start_coalescing, the
sends and receives, _end_coalescing) only when the group's type is exactly ProcessGroup
with a backend that says it coalesces; a group made by a Python backend is a subclass, so
torch posts the operations one by one. On CUDA tensors that hangs: a device send or
receive outside a group runs alone, in order (as with NCCL), so a ring in which every rank
sends first waits until the timeout. (torch 1.13 coalesces every group's batch.)
So for a ringlet group the batch runs here, between the group's _start_coalescing and
_end_coalescing, in every torch; any other group's batch goes to torch's function.
"""
import functools

from torch.distributed import distributed_c10d as _c10d

from ._backend_group import ProcessGroupRinglet
from ._backend_work import _drop_window


def _batch_isend_irecv_for(original):
    @functools.wraps(original)
    def batch_isend_irecv(p2p_op_list):
        check = getattr(_c10d, "_check_p2p_op_list", None)
        if check is not None:
            check(p2p_op_list)
        group = (p2p_op_list[0].group if p2p_op_list else None) or _c10d._get_default_group()
        if not isinstance(group, ProcessGroupRinglet):
            return original(p2p_op_list)
        device = p2p_op_list[0].tensor.device
        other = [op.tensor.device for op in p2p_op_list if op.tensor.device != device]
        if other:  # one block holds one device's calls; posted one by one, a ring would hang
            raise RuntimeError("ringlet: batch_isend_irecv: tensors on %s and %s in one batch: one batch per "
                               "device" % (device, other[0]))
        # Inside another group's block this one nests (that block's end runs it). A block of
        # this group still open is taken as left open by an error, and closed first
        # (_start_coalescing): so a batch inside the group's own block ends that block.
        group._start_coalescing(device)
        try:
            # (tensor, peer, group, tag): isend's and irecv's order in every torch; peer is global.
            # The sends first (each kind in the list's order, so each pair's messages keep theirs):
            # on host memory the calls are posted one by one, and a receive from a rank with no
            # connection yet waits (TCP, IB) for that rank's first send to this one.
            sends = [i for i, op in enumerate(p2p_op_list) if getattr(op.op, "__name__", "") == "isend"]
            order = sends + [i for i in range(len(p2p_op_list)) if i not in set(sends)]
            works = [None] * len(p2p_op_list)
            for i in order:
                op = p2p_op_list[i]
                works[i] = op.op(op.tensor, op.peer, op.group, op.tag)
        except BaseException:
            _drop_window()
            raise
        w = group._end_coalescing(device)
        # Nobody gets this Work (torch drops it too). On CUDA it stays among the group's
        # Works never waited for (up to 4096 of them): without its tensors, which the
        # stream keeps while it uses them (record_stream) and each op's own Work returns,
        # so that a pipeline's sent activations do not outlive the batch that long.
        if w is not None:
            w._outputs = []
        return works

    batch_isend_irecv._ringlet = True
    return batch_isend_irecv


def install():
    """Puts the function in place in torch.distributed (once)."""
    import torch.distributed as dist
    if getattr(_c10d.batch_isend_irecv, "_ringlet", False):
        return
    ours = _batch_isend_irecv_for(_c10d.batch_isend_irecv)
    _c10d.batch_isend_irecv = ours
    dist.batch_isend_irecv = ours

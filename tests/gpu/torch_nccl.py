"""PyTorch's own torch.distributed with backend="nccl", running on ringlet's libnccl.so.2
(LD_PRELOAD it; NCCL_DEBUG=INFO shows ringlet's "NCCL INFO [ringlet ...]" lines). Several
ranks share the one GPU (NCCL itself refuses that). Launched by ringlet-run or torchrun;
needs a CUDA build of PyTorch.

Checks, with random integer-valued float32 tensors (results exact): all_reduce (sum, max,
avg), broadcast from every root, all_gather_into_tensor, reduce_scatter_tensor,
all_to_all_single, send/recv around a ring, barrier, a new_group of the even ranks, and
that ringlet's library is the one loaded. Prints "torch_nccl: rank R: N checks, F failed".
"""
import os
import sys

import torch
import torch.distributed as dist


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if not torch.cuda.is_available():
        print("SKIP: torch has no CUDA here", flush=True)
        return 77
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    checks, failed = [0], [0]

    def check(cond, what):
        checks[0] += 1
        if not cond:
            failed[0] += 1
            print("FAIL rank %d: %s" % (rank, what), flush=True)

    with open("/proc/self/maps") as f:
        maps = f.read()
    libs = sorted({line.split()[-1] for line in maps.splitlines() if "libnccl.so" in line})
    check(any("ringlet" in l or "/build" in l for l in libs), "libnccl loaded from %s" % libs)
    check(torch.cuda.nccl.version() >= (2, 19, 0), "nccl version %s" % (torch.cuda.nccl.version(),))

    g = torch.Generator().manual_seed(1234)
    vals = [torch.randint(-100, 100, (4099,), generator=g).float() for _ in range(world)]
    mine = vals[rank].to(dev)
    for op, ref in ((dist.ReduceOp.SUM, sum(vals)), (dist.ReduceOp.MAX, torch.stack(vals).max(0).values)):
        t = mine.clone()
        dist.all_reduce(t, op=op)
        check(torch.equal(t.cpu(), ref), "all_reduce %s" % op)
    t = (mine * world).clone()
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    check(torch.equal(t.cpu(), sum(vals)), "all_reduce avg")
    for root in range(world):
        t = mine.clone()
        dist.broadcast(t, src=root)
        check(torch.equal(t.cpu(), vals[root]), "broadcast from %d" % root)
    out = torch.empty(world * 4099, device=dev)
    dist.all_gather_into_tensor(out, mine)
    check(torch.equal(out.cpu(), torch.cat(vals)), "all_gather_into_tensor")
    big = [torch.randint(-100, 100, (world * 1031,), generator=g).float() for _ in range(world)]
    out = torch.empty(1031, device=dev)
    dist.reduce_scatter_tensor(out, big[rank].to(dev))
    check(torch.equal(out.cpu(), sum(big)[rank * 1031:(rank + 1) * 1031]), "reduce_scatter_tensor")
    out = torch.empty(world * 1031, device=dev)
    dist.all_to_all_single(out, big[rank].to(dev))
    want = torch.cat([big[q][rank * 1031:(rank + 1) * 1031] for q in range(world)])
    check(torch.equal(out.cpu(), want), "all_to_all_single")
    if world > 1:
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        r = torch.empty(4099, device=dev)
        if rank % 2 == 0:
            dist.send(mine, nxt)
            dist.recv(r, prv)
        else:
            dist.recv(r, prv)
            dist.send(mine, nxt)
        check(torch.equal(r.cpu(), vals[prv]), "send/recv")
    dist.barrier()
    even = [q for q in range(world) if q % 2 == 0]
    pg = dist.new_group(even)
    if rank in even:
        t = mine.clone()
        dist.all_reduce(t, group=pg)
        check(torch.equal(t.cpu(), sum(vals[q] for q in even)), "all_reduce on new_group(%s)" % even)
    torch.cuda.synchronize()
    dist.barrier()
    print("torch_nccl: rank %d: %d checks, %d failed (libnccl: %s)" % (rank, checks[0], failed[0], ", ".join(libs)),
          flush=True)
    dist.destroy_process_group()
    return 1 if failed[0] else 0


if __name__ == "__main__":
    sys.exit(main())

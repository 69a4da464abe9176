"""PyTorch's own torch.distributed with backend="nccl", running on ringlet's libnccl.so.2
(LD_PRELOAD it; NCCL_DEBUG=INFO shows ringlet's "NCCL INFO [ringlet ...]" lines). Several
ranks share the one GPU (NCCL itself refuses that). Launched by ringlet-run or torchrun;
needs a CUDA build of PyTorch.

Checks, with random integer-valued tensors (results exact): all_reduce (sum, max, avg;
float32, and bfloat16 and float16 sums and a bfloat16 avg), broadcast from every root,
all_gather_into_tensor, reduce_scatter_tensor (also with torch's pre-multiplied sum where
torch has it, as FSDP uses it), all_to_all_single (even and uneven splits), send/recv
around a ring, the same ring through batch_isend_irecv, barrier, a new_group of the even
ranks; and that ringlet's library is the one loaded: every libnccl mapped is the one
RINGLET_NCCL_LIB names (LD_PRELOAD's; run.sh sets both), and ncclGetVersion as the process
resolves it answers ringlet's 2.19.3 (torch.cuda.nccl.version() is only the version torch
was built against). Prints "torch_nccl: rank R: N checks, F failed".
"""
import ctypes
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
    want = os.path.realpath(os.environ.get("RINGLET_NCCL_LIB", "build/lib/libnccl.so.2"))
    check(libs and all(os.path.realpath(l) == want for l in libs), "libnccl mapped from %s, want only %s" % (libs, want))
    v = ctypes.c_int(0)
    rc = ctypes.CDLL(None).ncclGetVersion(ctypes.byref(v))
    check(rc == 0 and v.value == 21903, "ncclGetVersion as resolved here: rc %d, version %d, want 21903 (ringlet's)"
          % (rc, v.value))

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
    # half types: values in [-8, 8], so every partial sum is exact in bfloat16 and float16
    small = [torch.randint(-8, 9, (5003,), generator=g).float() for _ in range(world)]
    for dt in (torch.bfloat16, torch.float16):
        t = small[rank].to(dev, dt)
        dist.all_reduce(t)
        check(torch.equal(t.float().cpu(), sum(small)), "all_reduce sum %s" % dt)
    t = (small[rank] * world).to(dev, torch.bfloat16)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    check(torch.equal(t.float().cpu(), sum(small)), "all_reduce avg bfloat16")
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
    premul = getattr(dist, "_make_nccl_premul_sum", None)
    if premul is not None:
        out = torch.empty(1031, device=dev)
        dist.reduce_scatter_tensor(out, big[rank].to(dev), op=premul(0.5))
        check(torch.equal(out.cpu(), sum(big)[rank * 1031:(rank + 1) * 1031] * 0.5),
              "reduce_scatter_tensor with a pre-multiplied sum (x 0.5)")
    out = torch.empty(world * 1031, device=dev)
    dist.all_to_all_single(out, big[rank].to(dev))
    want = torch.cat([big[q][rank * 1031:(rank + 1) * 1031] for q in range(world)])
    check(torch.equal(out.cpu(), want), "all_to_all_single")
    # uneven: rank r sends q + 1 elements to rank q, each r * 100 + q
    inp = torch.cat([torch.full((q + 1,), float(rank * 100 + q)) for q in range(world)]).to(dev)
    out = torch.empty(world * (rank + 1), device=dev)
    dist.all_to_all_single(out, inp, output_split_sizes=[rank + 1] * world,
                           input_split_sizes=[q + 1 for q in range(world)])
    want = torch.cat([torch.full((rank + 1,), float(r * 100 + rank)) for r in range(world)])
    check(torch.equal(out.cpu(), want), "all_to_all_single with uneven splits")
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
        r = torch.empty(4099, device=dev)
        ops = [dist.P2POp(dist.isend, mine, nxt), dist.P2POp(dist.irecv, r, prv)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        torch.cuda.synchronize()
        check(torch.equal(r.cpu(), vals[prv]), "batch_isend_irecv around the ring")
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

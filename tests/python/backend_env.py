"""init_process_group("ringlet") from a launcher's environment (or an init_method), then an
all_reduce, a subgroup and destroy_process_group.

    python3 tests/python/backend_env.py LAUNCHER [--init-method URL --rank R --world-size P]

LAUNCHER only labels the output line: "backend_env: rank R of P (LAUNCHER): OK". Under
srun's and mpirun's variables (SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/SIZE, with
MASTER_ADDR and MASTER_PORT, and no RANK or WORLD_SIZE) `import ringlet.torch` fills in
torch's RANK and WORLD_SIZE (and LOCAL_RANK); under torchrun and ringlet-run they are set.
"""
import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist

import ringlet.torch  # noqa: F401

ap = argparse.ArgumentParser()
ap.add_argument("launcher")
ap.add_argument("--init-method")
ap.add_argument("--rank", type=int, default=-1)
ap.add_argument("--world-size", type=int, default=-1)
a = ap.parse_args()

kw = {}
if a.init_method:
    kw = dict(init_method=a.init_method, rank=a.rank, world_size=a.world_size)
dist.init_process_group("ringlet", timeout=datetime.timedelta(seconds=60), **kw)
R, P = dist.get_rank(), dist.get_world_size()
t = torch.full((5,), float(R + 1))
dist.all_reduce(t)
ok = torch.equal(t, torch.full((5,), float(P * (P + 1) // 2)))
sub = dist.new_group([0])
if R == 0:
    s = torch.ones(2)
    dist.all_reduce(s, group=sub)
    ok = ok and torch.equal(s, torch.ones(2))
dist.barrier()
dist.destroy_process_group()
print("backend_env: rank %d of %d (%s; LOCAL_RANK %s): %s"
      % (R, P, a.launcher, os.environ.get("LOCAL_RANK"), "OK" if ok else "WRONG %s" % t), flush=True)
sys.exit(0 if ok else 1)

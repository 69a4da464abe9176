"""A rank killed in the middle of training with torch's DDP over the backend "ringlet": the
survivors raise RuntimeError within the group's timeout, naming the dead rank.

    ringlet-run -n P --grace 60 python3 tests/python/backend_kill.py --victim V --step K [--timeout S] [--hang]

The victim dies by construction, not by timing: at step K, a hook on the gradient of the
model's first layer (ready last in backward, after the later layers' buckets were
launched) SIGKILLs its own process, so the survivors are inside that step's all-reduces,
or about to enter them, when it dies. Each survivor prints
"backend_kill: survivor R: OK: <exception type> after X s: <message>" when the exception
comes within the timeout (X counted from the start of step K) and names rank V; and then
checks that a further collective fails at once and that destroy_process_group returns.
--hang: the victim SIGSTOPs itself instead (a hung rank); the survivors must raise once
the timeout given to the training group has passed (ringlet's deadline is torch's
timeout; less two heartbeat periods, from which the monitor counts the silence), and
before twice it plus 2 s (no hang), naming rank V; then the lowest survivor SIGKILLs the victim.
"""
import argparse
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import ringlet.torch  # noqa: F401

ap = argparse.ArgumentParser()
ap.add_argument("--victim", type=int, default=1)
ap.add_argument("--step", type=int, default=3)
ap.add_argument("--steps", type=int, default=6)
ap.add_argument("--timeout", type=float, default=20)
ap.add_argument("--hang", action="store_true")
a = ap.parse_args()

# The timeout under test is the training group's, made once every rank is up: given to
# init_process_group, it would also bound the ranks' start (three imports of torch on 2 cores).
dist.init_process_group("ringlet", timeout=datetime.timedelta(seconds=max(a.timeout, 120)))
R, P = dist.get_rank(), dist.get_world_size()
pids = [None] * P
dist.all_gather_object(pids, os.getpid())
pg = dist.new_group(list(range(P)), timeout=datetime.timedelta(seconds=a.timeout))
torch.set_num_threads(1)
torch.manual_seed(1)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                            torch.nn.Linear(256, 8))
ddp = DDP(model, bucket_cap_mb=0.05, process_group=pg)  # several buckets
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
state = {"step": -1}


def die(grad):
    if R == a.victim and state["step"] == a.step:
        print("backend_kill: rank %d: %s itself in backward of step %d"
              % (R, "stopping" if a.hang else "killing", a.step), flush=True)
        os.kill(os.getpid(), signal.SIGSTOP if a.hang else signal.SIGKILL)
    return grad


model[0].weight.register_hook(die)

t_step = None
try:
    for s in range(a.steps):
        state["step"] = s
        t_step = time.monotonic()
        x = torch.randn(32, 64)
        loss = ddp(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    print("backend_kill: survivor %d: FAIL: training finished; no error although rank %d died" % (R, a.victim),
          flush=True)
    sys.exit(1)
except Exception as e:  # noqa: BLE001
    dt = time.monotonic() - t_step
    msg = " ".join(str(e).split())
    # hung: not well before the deadline (it applied), and not long after it (no hang).
    # The monitor counts the silence from the victim's last heartbeat (one every
    # min(1 s, timeout/4)), which may come that long before the stop, or longer on a loaded
    # machine: two periods' slack below; above, a deadline's worth (three torch processes
    # on two cores are slow to be scheduled).
    beat = min(1.0, a.timeout / 4)
    ok = isinstance(e, RuntimeError) and ("rank %d" % a.victim) in msg and (
        a.timeout - 2 * beat <= dt < 2 * a.timeout + 2 if a.hang else dt < a.timeout)
    if a.hang and R == min(q for q in range(P) if q != a.victim):
        os.kill(pids[a.victim], signal.SIGKILL)
    print("backend_kill: survivor %d: %s: %s after %.2f s in step %d: %s"
          % (R, "OK" if ok else "FAIL", type(e).__name__, dt, state["step"], msg[:600]), flush=True)
    if not ok:
        sys.exit(1)

# the group is broken now: a collective fails at once, and destroy returns
t0 = time.monotonic()
try:
    dist.all_reduce(torch.ones(4), group=pg)
    print("backend_kill: survivor %d: FAIL: an all_reduce after the failure succeeded" % R, flush=True)
    sys.exit(1)
except RuntimeError as e:
    later = " ".join(str(e).split())
dt = time.monotonic() - t0
dist.destroy_process_group()
ok = dt < 5
print("backend_kill: survivor %d: %s: the next all_reduce failed after %.2f s (%s); destroy returned"
      % (R, "OK" if ok else "FAIL", dt, later[:200]), flush=True)
sys.exit(0 if ok else 1)

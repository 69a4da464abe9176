"""Collectives through the torch.distributed backend "ringlet": bandwidth and latency.

    ringlet-run -n P python3 perf/backend_bench.py [--mib 64] [--rounds 5]     (or perf/backend_bench.sh)

Every rank: init_process_group("ringlet") (env://), a Gloo group over the same ranks, and
the same communicator's C calls through ringlet's own binding as a third column. Rounds
alternate, so drifts of a shared machine hit every column alike; each figure is the median
over rounds of the slowest rank's time.
  - dist.all_reduce of --mib MiB of float32, in place, back to back (--iters per round),
    through the backend, against ringlet_allreduce on the backend's communicator (the C
    call, as ringlet-perf makes it): time per call, algbw, busbw = algbw x 2(P-1)/P.
    perf/backend_bench.sh runs ringlet-perf (in place) before and after this script, and
    states the backend's busbw against ringlet-perf's (goal >= 0.90).
  - dist.all_reduce of 8 bytes (2 float32), synchronous, --small-iters calls per round,
    median call time: the backend (goal <= 50 us at 2 ranks) against Gloo.
Prints "backend_bench: ..." lines; the machine-readable ones start with "backend_bench: RESULT".
"""
import argparse
import statistics
import sys
import time

import torch
import torch.distributed as dist

import ringlet.torch  # noqa: F401  (registers the backend)
from ringlet import _lib


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=float, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20, help="large all-reduces per round and column (ringlet-perf -n 20)")
    ap.add_argument("--small-iters", type=int, default=2000, help="8-byte all-reduces per round and column")
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("ringlet")
    R, P = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    pg = dist.distributed_c10d._get_default_group()
    h = pg._handle  # the backend's communicator
    L = _lib.lib

    def slowest(v):
        t = torch.tensor([v], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
        return t.item()

    n = int(a.mib * (1 << 20)) // 4
    big = torch.ones(n, dtype=torch.float32)

    def backend_big():
        for _ in range(a.iters):
            dist.all_reduce(big)

    def c_big():
        p = big.data_ptr()
        for _ in range(a.iters):
            rc = L.ringlet_allreduce(p, p, n, _lib.FLOAT32, _lib.SUM, h, None)
            if rc:
                raise RuntimeError("ringlet_allreduce: %d" % rc)

    small = torch.ones(2, dtype=torch.float32)
    lat = {"backend": [], "gloo": []}

    def small_loop(group, key):
        ts = []
        for _ in range(a.small_iters):
            t0 = time.perf_counter()
            dist.all_reduce(small, group=group)
            ts.append(time.perf_counter() - t0)
        lat[key].append(statistics.median(ts))

    # warm-up
    backend_big()
    c_big()
    for g, k in ((None, "backend"), (gloo, "gloo")):
        for _ in range(200):
            dist.all_reduce(small, group=g)
    big_t = {"backend": [], "c": []}
    for r in range(a.rounds):
        cols = [("backend", backend_big), ("c", c_big)]
        if r % 2:
            cols.reverse()
        for key, fn in cols:
            dist.barrier(group=gloo)
            t0 = time.perf_counter()
            fn()
            big_t[key].append(slowest((time.perf_counter() - t0) / a.iters))
        order = [(None, "backend"), (gloo, "gloo")]
        if r % 2:
            order.reverse()
        for g, k in order:
            dist.barrier(group=gloo)
            small_loop(g, k)
            lat[k][-1] = slowest(lat[k][-1])
    nbytes = n * 4
    if R == 0:
        print("backend_bench: %d ranks, all_reduce of %d bytes float32 in place, %d x %d calls; 8-byte all_reduce, "
              "%d x %d calls" % (P, nbytes, a.rounds, a.iters, a.rounds, a.small_iters))
        for key, what in (("backend", "dist.all_reduce (backend ringlet)"), ("c", "ringlet_allreduce (C, same comm)")):
            t = statistics.median(big_t[key])
            alg = nbytes / t / 1e9
            print("backend_bench: RESULT big %-8s %-36s time %8.2f ms  algbw %6.3f GB/s  busbw %6.3f GB/s"
                  % (key, what, t * 1e3, alg, alg * 2 * (P - 1) / P))
        for key in ("backend", "gloo"):
            print("backend_bench: RESULT small %-8s median %7.1f us (rounds: %s)"
                  % (key, statistics.median(lat[key]) * 1e6, ", ".join("%.1f" % (v * 1e6) for v in lat[key])))
        b, g = statistics.median(lat["backend"]), statistics.median(lat["gloo"])
        print("backend_bench: 8-byte all_reduce: backend %.1f us (goal <= 50 us at 2 ranks), gloo %.1f us, "
              "backend / gloo = %.3f" % (b * 1e6, g * 1e6, b / g))
        tb, tc = statistics.median(big_t["backend"]), statistics.median(big_t["c"])
        print("backend_bench: %g MiB all_reduce: backend's busbw / the C call's on its communicator = %.3f"
              % (a.mib, tc / tb))
        sys.stdout.flush()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

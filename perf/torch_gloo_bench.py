#!/usr/bin/env python3
"""PyTorch's own Gloo backend: all_reduce (float32 sum, in place) bandwidth over TCP loopback.

The torch.distributed counterpart of shared/peers/gloo_allreduce_bench.cc, with the same iteration rule
and the same table, so that one parser reads both:

    python3 perf/torch_gloo_bench.py -n 4                      # launches 4 ranks, prints rank 0's table
    python3 perf/torch_gloo_bench.py -n 2 -e 1M -t 0.2         # sizes up to 1 MiB, 0.2 s per size
    python3 perf/torch_gloo_bench.py -n 2 --device cuda        # CUDA tensors (Gloo copies through the host)
    torchrun --nproc-per-node 4 perf/torch_gloo_bench.py       # or any launcher that sets RANK/WORLD_SIZE/
                                                               # MASTER_ADDR/MASTER_PORT (env://)

Without a launcher's environment and without --rank, the script is its own launcher: it starts -n
processes of itself (`--rank R --world N --store FILE`, a fresh torch.distributed.FileStore in a temporary
folder), each bounded by --timeout seconds; rank 0 prints to stdout, the others to log files that are
shown only when a rank fails. GLOO_SOCKET_IFNAME defaults to lo (the peer drivers bind 127.0.0.1).

Sizes: 4K 64K 1M 16M 64M 256M (bytes), those in [-b, -e]. Per size, as the C++ driver: 1 untimed warm-up
call, 2 timed calls for an estimate (max over ranks), iters = clamp(target_s / est, 3, 100000), barrier,
timed loop (time = max over ranks / iters) on zero-filled data; then rank r fills x[i] = (7919 i + 104729 r)
mod 1021 (integers, so the float32 sum is exact), runs one call, and every element is checked against the
sum computed in int64. Time guard: if the previous size's per-call time scaled by the size ratio exceeds
--max-call-s, the remaining sizes are printed as SKIP.

Output (rank 0), the columns of gloo_allreduce_bench:
    algo bytes time_us algbw_GBps busbw_GBps iters check
algo is "torch" (CPU tensors) or "torch_cuda" (--device cuda), or --label. algbw = bytes / time,
busbw = algbw * 2(n-1)/n, GB = 1e9 B. Exit status 0 when every check passed, 2 when one failed.
Works with PyTorch 1.13 and 2.x (stable torch.distributed APIs only).
"""
import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import time

SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20]
CHUNK = 1 << 22  # elements per step of the check (bounds its temporary memory)


def parse_bytes(s):
    s = s.strip().upper().rstrip("B").rstrip("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="torch.distributed Gloo all_reduce bandwidth (float32 sum, in place)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--nranks", type=int, default=2, help="ranks to launch (launcher mode; default 2)")
    p.add_argument("-t", "--target-s", type=float, default=1.0, help="seconds of timed loop per size (1.0)")
    p.add_argument("-b", "--min-bytes", type=parse_bytes, default=0, help="smallest size (K/M/G suffixes)")
    p.add_argument("-e", "--max-bytes", type=parse_bytes, default=256 << 20, help="largest size (256M)")
    p.add_argument("--max-call-s", type=float, default=2.0,
                   help="skip the larger sizes once a call would take longer than this (2.0)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="tensor device (cpu)")
    p.add_argument("--label", default=None, help="algo column (torch / torch_cuda)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank (1)")
    p.add_argument("--timeout", type=float, default=float(os.environ.get("GLOO_TIMEOUT_S", 300)),
                   help="seconds per rank process in launcher mode, and the process group timeout (300)")
    # worker mode (used by the launcher)
    p.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--world", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--store", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.target_s <= 0:
        a.target_s = 1.0
    if a.label is None:
        a.label = "torch" if a.device == "cpu" else "torch_cuda"
    return a


# ---------------------------------------------------------------- launcher ------------------------------
def launch(a, argv):
    n = a.nranks
    if n < 1:
        sys.exit("torch_gloo_bench: -n must be >= 1")
    tmp = tempfile.mkdtemp(prefix="torch_gloo_bench.")
    store = os.path.join(tmp, "store")
    env = dict(os.environ)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env.setdefault("OMP_NUM_THREADS", str(a.threads))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    procs, logs = [], []
    try:
        for r in range(n):
            cmd = [sys.executable, os.path.abspath(__file__)] + argv + [
                "--rank", str(r), "--world", str(n), "--store", store]
            if r == 0:
                procs.append(subprocess.Popen(cmd, env=env))
                logs.append(None)
            else:
                log = open(os.path.join(tmp, "rank%d.log" % r), "wb")
                logs.append(log)
                procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + a.timeout
        failed_at = None
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
                failed_at = now  # one rank died: give the others a moment, then stop them
            if now > deadline or (failed_at is not None and now > failed_at + 10):
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                print("torch_gloo_bench: %s; ranks stopped" % ("timeout after %.0f s" % a.timeout
                      if now > deadline else "a rank failed"), file=sys.stderr)
                break
            time.sleep(0.05)
        rcs = [p.wait() for p in procs]
        rc = 0
        for r, c in enumerate(rcs):
            if c != 0:
                rc = c if c > 0 else 1
                if logs[r] is not None:
                    logs[r].close()
                    with open(logs[r].name, "rb") as f:
                        txt = f.read().decode(errors="replace")[-4000:]
                    print("--- rank %d (exit status %d):\n%s" % (r, c, txt), file=sys.stderr)
        return rc
    finally:
        for log in logs:
            if log is not None and not log.closed:
                log.close()
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- worker --------------------------------
def worker(a):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(max(1, a.threads))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    timeout = datetime.timedelta(seconds=max(60.0, a.timeout))
    if a.rank is not None:
        rank, n = a.rank, a.world
        store = dist.FileStore(a.store, n)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=n, timeout=timeout)
    else:  # a launcher's environment (torchrun, ...)
        dist.init_process_group("gloo", init_method="env://", timeout=timeout)
        rank, n = dist.get_rank(), dist.get_world_size()

    cuda = a.device == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            sys.exit("torch_gloo_bench: --device cuda but CUDA is not available")
        local = int(os.environ.get("LOCAL_RANK", rank))
        dev = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    def allmax(v):
        t = torch.tensor([float(v)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    sizes = [s for s in SIZES if a.min_bytes <= s <= a.max_bytes]
    big = max(sizes) if sizes else 0
    buf = torch.zeros(big // 4, dtype=torch.float32, device=dev)

    if rank == 0:
        print("# torch_gloo_bench ranks=%d target_s=%.2f float32 sum in-place tcp %s device=%s torch=%s"
              % (n, a.target_s, os.environ.get("GLOO_SOCKET_IFNAME", "?"), a.device, torch.__version__))
        print("%-10s %12s %12s %12s %12s %8s %6s" % ("algo", "bytes", "time_us", "algbw_GBps",
                                                     "busbw_GBps", "iters", "check"))
        sys.stdout.flush()

    allok = True
    prev_t, prev_b = 0.0, 0
    for nbytes in sizes:
        if prev_b and prev_t * (nbytes / prev_b) > a.max_call_s:
            if rank == 0:
                print("%-10s %12d %12s %12s %12s %8s %6s" % (a.label, nbytes, "-", "-", "-", "0", "SKIP"))
                sys.stdout.flush()
            continue
        cnt = nbytes // 4
        x = buf[:cnt]
        x.zero_()
        sync()

        dist.all_reduce(x)  # warm-up
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        dist.all_reduce(x)
        sync()
        est = allmax((time.perf_counter() - t0) / 2)
        iters = int(a.target_s / (est if est > 1e-9 else 1e-9))
        iters = max(3, min(100000, iters))

        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        sync()
        el = allmax(time.perf_counter() - t0)

        # correctness: integer pattern, exact in float32
        for s in range(0, cnt, CHUNK):
            e = min(cnt, s + CHUNK)
            i = torch.arange(s, e, dtype=torch.int64, device=dev)
            x[s:e] = ((i * 7919 + rank * 104729) % 1021).to(torch.float32)
        dist.all_reduce(x)
        sync()
        ok = True
        for s in range(0, cnt, CHUNK):
            e = min(cnt, s + CHUNK)
            i = torch.arange(s, e, dtype=torch.int64, device=dev)
            want = torch.zeros(e - s, dtype=torch.int64, device=dev)
            for r in range(n):
                want += (i * 7919 + r * 104729) % 1021
            if not torch.equal(x[s:e], want.to(torch.float32)):
                ok = False
                break
        ok = allmax(0.0 if ok else 1.0) == 0.0
        allok &= ok
        x.zero_()

        t = el / iters
        prev_t, prev_b = t, nbytes
        alg = nbytes / t / 1e9
        bus = alg * 2.0 * (n - 1) / n
        if rank == 0:
            print("%-10s %12d %12.1f %12.3f %12.3f %8d %6s" % (a.label, nbytes, t * 1e6, alg, bus, iters,
                                                               "OK" if ok else "FAIL"))
            sys.stdout.flush()

    dist.barrier()
    dist.destroy_process_group()
    return 0 if allok else 2


def main():
    argv = sys.argv[1:]
    a = parse_args(argv)
    launched = all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))
    if a.rank is None and not launched:
        return launch(a, argv)
    return worker(a)


if __name__ == "__main__":
    sys.exit(main())

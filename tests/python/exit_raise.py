"""A rank that ends with an uncaught exception while another waits for it in a collective:
the waiting rank fails at once, naming it. (ringlet's atexit handlers abort the
communicators then; a clean destroy told the peers the rank had left in good order, and
the one waiting for it waited out RINGLET_TIMEOUT.)

    ringlet-run -n 2 --grace 60 python3 tests/python/exit_raise.py binding|backend

binding: ringlet's own Python binding (ringlet.init_from_env, ringlet.all_reduce);
backend: torch.distributed over the backend "ringlet". Both ranks make one all-reduce;
then rank 1 raises RuntimeError, uncaught, and rank 0 makes a second all-reduce, which
waits for rank 1. It must fail within LIMIT_S (RINGLET_TIMEOUT is far longer in the test)
with a message naming rank 1. Rank 0 prints "exit_raise: rank 0: OK ..." or "... FAIL ...".
"""
import os
import sys
import time

import torch

LIMIT_S = 15.0


def main():
    mode = sys.argv[1]
    rank = int(os.environ["RANK"])
    x = torch.ones(1000)
    if mode == "binding":
        import ringlet
        ringlet.init_from_env()
        reduce = ringlet.all_reduce
    else:
        import torch.distributed as dist
        import ringlet.torch  # noqa: F401  (registers the backend)
        dist.init_process_group("ringlet")
        reduce = dist.all_reduce
    reduce(x)
    if rank == 1:
        raise RuntimeError("exit_raise: rank 1 ends with an uncaught exception, on purpose")
    t = time.monotonic()
    try:
        reduce(x)
        print("exit_raise: rank 0: FAIL: the all-reduce without rank 1 succeeded", flush=True)
        return 1
    except Exception as e:  # RingletError, or torch's RuntimeError
        dt = time.monotonic() - t
        ok = dt < LIMIT_S and "rank 1" in str(e)
        print("exit_raise: rank 0: %s: %s after %.1f s: %s" % ("OK" if ok else "FAIL", type(e).__name__, dt,
                                                              str(e)[:300]), flush=True)
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

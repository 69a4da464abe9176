"""Train a small CNN with BatchNorm on synthetic images with ringlet's DDP.

    ringlet-run -n 4 python3 examples/ddp_cnn.py [--steps 100] [--batch 32]
    torchrun --standalone --nproc_per_node 4 --redirects 2 --tee 2 examples/ddp_cnn.py
    (the flags as Debian's torch 1.13 takes them on Python 3.11: README, torchrun)

(from a source checkout: PYTHONPATH=python, and libringlet is found in build/lib.)

The task: 16x16 one-channel images of noise with a slightly brighter 4x4 square in one of the four
quadrants; the class is the quadrant. Every rank draws its own images (its shard of the
data). The training loop is the one of torch's DistributedDataParallel: only the
wrapper's import differs. At the end, rank 0 prints the loss and accuracy, and every rank
checks that its parameters equal rank 0's. Exit status 0 on success.
"""
import argparse
import sys

import torch

import ringlet
from ringlet.torch import DistributedDataParallel as DDP


def batch_of(n, generator):
    x = torch.randn(n, 1, 16, 16, generator=generator)
    y = torch.randint(0, 4, (n,), generator=generator)
    for i in range(n):
        r, c = divmod(int(y[i]), 2)
        x[i, 0, 2 + 8 * r:6 + 8 * r, 2 + 8 * c:6 + 8 * c] += 0.6
    return x, y


def make_model():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(16 * 4 * 4, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=32, help="images per rank and step")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    ringlet.init_from_env()
    rank, world = ringlet.get_rank(), ringlet.get_world_size()
    torch.manual_seed(rank)  # a different initialisation per rank: DDP broadcasts rank 0's
    model = DDP(make_model(), bucket_cap_mb=0.01, first_bucket_cap_mb=0.002)  # small buckets: a small model
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(12345 + rank)  # this rank's shard

    model.train()
    for step in range(a.steps):
        x, y = batch_of(a.batch, gen)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()  # gradients averaged over the ranks when this returns
        opt.step()
        if rank == 0 and (step % 20 == 0 or step == a.steps - 1):
            print("ddp_cnn: step %d: loss %.4f" % (step, loss.item()), flush=True)

    model.eval()
    with torch.no_grad():
        x, y = batch_of(256, torch.Generator().manual_seed(999))
        acc = (model(x).argmax(1) == y).float().mean().item()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    ref = flat.clone()
    ringlet.broadcast(ref, src=0)
    same = torch.equal(flat, ref)
    print("ddp_cnn: rank %d of %d: accuracy %.3f on held-out images, %d buckets, parameters equal to rank 0's: %s"
          % (rank, world, acc, model.num_buckets, "yes" if same else "NO"), flush=True)
    ringlet.destroy()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

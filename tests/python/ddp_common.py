"""Shared by the Python DDP tests: environment, models, data shards, comparisons.

Imported by scripts run under ringlet-run (RANK/WORLD_SIZE set); ringlet comes from
python/ (PYTHONPATH), the library from RINGLET_LIB.
"""
import os
import sys

import torch


def rank_world():
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def setup_threads():
    # ranks share a few cores: one intra-op thread each keeps runs fast and reproducible
    torch.set_num_threads(1)


def mlp_bn(seed, width=64, with_bn=True):
    """Linear layers with BatchNorm in between (several buckets at a small cap)."""
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(16, width)]
    if with_bn:
        layers.append(torch.nn.BatchNorm1d(width))
    layers += [torch.nn.ReLU(), torch.nn.Linear(width, width)]
    if with_bn:
        layers.append(torch.nn.BatchNorm1d(width))
    layers += [torch.nn.ReLU(), torch.nn.Linear(width, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)]
    return torch.nn.Sequential(*layers)


def shard(rank, step, batch, salt=0):
    """Deterministic (input, target) of one rank's shard at one step."""
    g = torch.Generator().manual_seed(1_000_003 * (salt + 1) + 7919 * step + rank)
    x = torch.randn(batch, 16, generator=g)
    y = torch.randn(batch, 4, generator=g)
    return x, y


def state(model):
    """Parameters and buffers, detached copies, by name (without a DDP 'module.' prefix)."""
    out = {}
    for k, v in model.state_dict().items():
        out[k[7:] if k.startswith("module.") else k] = v.detach().clone()
    return out


def compare(a, b):
    """Worst normwise relative difference over tensors: max|a-b| / max|b| per tensor
    (integer tensors must be equal: reported as 0 or inf); plus the worst elementwise
    relative difference over elements with |b| >= 1e-3 max|b|. Returns
    (normwise, elementwise, name of the worst tensor)."""
    worst, worst_el, worst_name = 0.0, 0.0, None
    assert a.keys() == b.keys(), (sorted(a.keys()), sorted(b.keys()))
    for k in a:
        x, y = a[k], b[k]
        if not x.is_floating_point():
            r = 0.0 if torch.equal(x, y) else float("inf")
            el = r
        else:
            x, y = x.double(), y.double()
            d = (x - y).abs()
            scale = y.abs().max().item()
            r = d.max().item() / scale if scale > 0 else d.max().item()
            mask = y.abs() >= 1e-3 * scale
            el = (d[mask] / y.abs()[mask]).max().item() if mask.any() else 0.0
        if r > worst:
            worst, worst_name = r, k
        worst_el = max(worst_el, el)
    return worst, worst_el, worst_name


def log(rank, *args):
    print("rank %d:" % rank, *args, flush=True)


def skip_unless_torch():
    """Exit 77 (skip) when torch cannot be imported; the scripts import it after this."""
    try:
        import torch  # noqa: F401
    except Exception as e:  # pragma: no cover
        print("SKIP: torch is not importable: %s" % e)
        sys.exit(77)

"""python3 -m ringlet: the package's version, the library it loaded (path and version),
where the package is, and whether torch and the backend "ringlet" are there."""
import os
import sys

import ringlet


def main():
    here = os.path.dirname(os.path.abspath(ringlet.__file__))
    print("ringlet %s (Python package at %s)" % (ringlet.__version__, here))
    print("library: %s (libringlet %s)" % (os.path.realpath(ringlet.library_path), ringlet.version()))
    try:
        import torch
    except ImportError:
        print("torch: not importable (the backend \"ringlet\" needs it)")
        return 0
    try:
        import importlib
        importlib.import_module("ringlet.torch")  # registers the backend
        import torch.distributed as dist
        backend = "backend \"ringlet\" registered" if "RINGLET" in getattr(dist.Backend, "_plugins", {}) else \
            "backend \"ringlet\" NOT registered"
    except Exception as e:  # noqa: BLE001
        backend = "import ringlet.torch failed: %s" % e
    print("torch: %s%s; %s" % (torch.__version__, " (CUDA %s)" % torch.version.cuda if torch.version.cuda else " (CPU)",
                               backend))
    return 0


sys.exit(main())

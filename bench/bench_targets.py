"""Call targets for bench/run.py, imported inside the workers (bench/ is put on their sys_path).

Must import nothing heavy at module level: the cold-start row times a worker that never
imports torch, and the py310-numpy1 worker has no torch at all.
"""

from __future__ import annotations


def noop() -> None:
    return None


def echo(x):
    """Identity: the worker sends back the view it received, so it copies it into its own
    pool for the reply."""
    return x


def import_torch() -> str:
    import torch

    return torch.__version__


def set_threads(n: int) -> int:
    """Sets torch's intra-op thread count in the worker; returns the previous one."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(n)
    return old

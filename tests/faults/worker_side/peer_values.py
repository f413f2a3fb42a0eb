"""What a worker sends that is heavy or hostile for the host to take in: floods of log records
under new logger names, integers of any size, exceptions whose classes claim modules the host
has not imported, and tensors for a host without torch (tests/faults/test_log_records.py,
test_big_ints.py, test_peer_imports.py)."""

from __future__ import annotations

import logging

BIG_INTS = {
    "10**5000": 10**5000,
    "-(10**5000)": -(10**5000),
    "2**64": 2**64,
    "-2**63-1": -(2**63) - 1,
    "2**63": 2**63,
    "-2**63": -(2**63),
    "2**100000-1": 2**100000 - 1,
}


def big_int(name):
    """The worker's own copy of one of :data:`BIG_INTS` (made here, not received)."""
    return BIG_INTS[name]


def same_int(name, value):
    """Whether ``value`` arrived as the exact int the host meant."""
    return type(value) is int and value == BIG_INTS[name]


def int_of_bytes(nbytes):
    """An int whose two's complement needs ``nbytes`` bytes."""
    return 1 << (8 * nbytes - 2)


def log_flood(count, prefix):
    """``count`` records, each from a logger never used before."""
    for i in range(count):
        logging.getLogger(f"{prefix}.{i}").warning("record %d", i)
    return count


def raise_named(module, qualname, message="from the worker"):
    """Raises an exception whose class says it is ``module.qualname``."""
    cls = type(qualname.rpartition(".")[2] or "X", (Exception,), {})
    cls.__module__ = module
    cls.__qualname__ = qualname
    raise cls(message)


def tensor(kind):
    """A small tensor of ``kind`` ("torch" imports torch here; "numpy" does not)."""
    if kind == "torch":
        import torch

        return torch.arange(6, dtype=torch.float32).reshape(2, 3)
    import numpy as np

    return np.arange(6, dtype=np.float32).reshape(2, 3)

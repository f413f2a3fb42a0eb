"""Functions the tests call inside workers. Importable with or without torch."""

import logging
import os
import signal
import sys
import time

KEPT = []


def echo(*args, **kwargs):
    if kwargs:
        return args, kwargs
    return args[0] if len(args) == 1 else args


def keep(x):
    KEPT.append(x)
    return len(KEPT)


def drop_kept():
    KEPT.clear()
    import gc

    gc.collect()
    return True


def describe(x):
    """Type, dtype, shape and strides of what arrived."""
    t = type(x)
    out = {"type": f"{t.__module__}.{t.__qualname__}"}
    if hasattr(x, "dtype"):
        out["dtype"] = str(x.dtype)
        out["shape"] = list(x.shape)
        strides = x.stride() if callable(getattr(x, "stride", None)) else x.strides
        out["strides"] = list(strides)
    return out


def versions():
    import platform

    out = {"python": platform.python_version()}
    for mod in ("torch", "numpy"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            out[mod] = None
    return out


def fill(n, value):
    import torch

    return torch.full((n,), value, dtype=torch.float32)


def numpy_arange(n):
    import numpy as np

    return np.arange(n, dtype=np.int64)


class PackOnlyError(Exception):
    pass


def raise_(kind, message="boom"):
    if kind == "value":
        raise ValueError(message)
    if kind == "key":
        raise KeyError(message)
    if kind == "pack":
        raise PackOnlyError(message)
    if kind == "oom":
        import torch

        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    if kind == "exit":
        sys.exit(3)
    if kind == "file":
        open(message)  # noqa: SIM115  (a FileNotFoundError carrying its file name)
    raise RuntimeError(message)


def sleep(seconds, note=None):
    if note:
        print(note, file=sys.stderr, flush=True)
    time.sleep(seconds)
    return seconds


def die(how):
    print("about to die", file=sys.stderr, flush=True)
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    os._exit(7)


def chat(message):
    print(f"stdout: {message}")
    print(f"stderr: {message}", file=sys.stderr)
    logging.getLogger("testpack").warning("log: %s\nsecond line", message)
    return True


def chatter(n):
    """``n`` numbered lines on stderr and as log records, returned before the host has read them."""
    for i in range(n):
        print(f"line {i}", file=sys.stderr)
        logging.getLogger("testpack").warning("record %d", i)
    return n


def progress(total, seconds):
    """A real tqdm bar on stderr, as a model download draws it: ``total`` steps over
    ``seconds``, each state redrawn with ``\\r``, ``\\n`` only when it closes."""
    from tqdm import tqdm

    for _ in tqdm(range(total), desc="download", mininterval=0, file=sys.stderr):
        time.sleep(seconds / total)
    return total


def at(x, i):
    """Element ``i`` of the flattened tensor or array that arrived, as a Python number."""
    flat = x.reshape(-1)
    return flat[i].item()


def scribble(x, value, numpy=False):
    """Writes ``value`` into element 0 of the input in place (through numpy if asked), as
    a careless node does; returns element 0 as it reads now."""
    if numpy:
        x.numpy().reshape(-1)[0] = value
    else:
        x.reshape(-1)[0] = value
    return x.reshape(-1)[0].item()


def view_watched(x):
    """Whether the input's view is armed for the written-only scan (ADR 0039), whether it
    shows no page of ours (none written, none dropped and left unarmed), and whether this
    process can arm a private mapping of a shared file at all."""
    import ctypes
    import mmap

    from comfy_airlock import _native

    fd = os.memfd_create("airlock-probe")
    try:
        os.ftruncate(fd, 1 << 20)
        probe = mmap.mmap(fd, 1 << 20, flags=mmap.MAP_PRIVATE)
    finally:
        os.close(fd)
    first = ctypes.c_char.from_buffer(probe)
    can = _native.watch_private(ctypes.addressof(first), 1 << 20)
    del first
    probe.close()
    addr, n = x.data_ptr(), x.nbytes
    return _native.private_watched(addr, n), _native.private_pages(addr, n) == [], can


def keep_scribbled(x, value):
    """Writes ``value`` into element 0 of the input in place and keeps the input."""
    x.reshape(-1)[0] = value
    KEPT.append(x)
    return len(KEPT)


def kept_at(i, j):
    """Element ``j`` of the ``i``-th kept input, as it reads now."""
    return KEPT[i].reshape(-1)[j].item()


def ones(n):
    """A new float32 tensor of ``n`` elements made here: a node's fresh output."""
    import torch

    return torch.ones(n)


def heap_churn(size, blocks):
    """What an operator-heavy node does to the C heap: ``blocks`` blocks of ``size`` bytes
    allocated, written and freed. Returns the minor page faults this process took meanwhile
    and its anonymous resident memory after, in KiB."""
    import ctypes

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    before = _minor_faults()
    held = []
    for _ in range(blocks):
        p = libc.malloc(size)
        ctypes.memset(p, 1, size)
        held.append(p)
    for p in reversed(held):
        libc.free(p)
    return _minor_faults() - before, rss_anon_kib()


def _minor_faults():
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def rss_anon_kib():
    """This process's anonymous resident memory (its heaps), in KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return -1

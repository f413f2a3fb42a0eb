"""Node-shaped functions the born-output tests call inside a worker (ADR 0044): each makes its
output the way real image nodes do (a torch operator on its input, or a fresh tensor)."""

import os
import threading

import torch

KEPT = []


def scale(image, factor):
    """An image filter: a fresh output of the input's shape (``image * factor``)."""
    return image * factor


def made(n, value):
    """A fresh float32 tensor of ``n`` elements filled with ``value``."""
    return torch.full((n,), float(value))


def made_and_kept(n, value):
    """A fresh output the node also keeps (a cache of its last result)."""
    out = torch.full((n,), float(value))
    KEPT.append(out)
    return out


def kept():
    """The kept output, sent again (a cached result fed to the next node)."""
    return KEPT[-1]


def drop_kept():
    KEPT.clear()
    return True


def stats():
    """The worker's births and its call lane's pool."""
    from comfy_airlock import _native
    from comfy_airlock.worker import link

    return {"born": _native.born_stats(), "pool": dict(link.LINK.lane.stats())}


def environment():
    """What the pack sees: its LD_PRELOAD, and whether a child process it starts maps the
    preload library."""
    import subprocess
    import sys

    child = subprocess.run(
        [sys.executable, "-c", "print(open('/proc/self/maps').read())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    with open("/proc/self/maps") as f:
        mine = f.read()
    return {
        "ld_preload": os.environ.get("LD_PRELOAD"),
        "mapped_here": "libairlock_born.so" in mine,
        "mapped_in_child": "libairlock_born.so" in child,
    }


def fork_with_born(n):
    """Forks while a born block lives: the child frees it and allocates and frees large blocks
    of its own (torch's and libc's, no OpenMP kernel: a forked child has no thread team), then
    exits 0; the parent's block must be intact after."""
    import ctypes

    out = torch.full((n,), 7.0)
    pid = os.fork()
    if pid == 0:
        try:
            del out  # the parent's block: the child's free must leave it alone
            for _ in range(4):
                t = torch.empty(n)
                ctypes.memset(t.data_ptr(), 0, t.numel() * t.element_size())
                del t
            os._exit(0)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out


def two_threads(n, rounds):
    """The node's thread makes outputs while another thread of the pack makes and frees large
    tensors of its own; returns the node's outputs' sums and the other thread's."""
    other = []

    def churn():
        for i in range(rounds):
            t = torch.full((n,), float(i))
            other.append(float(t.sum()))

    th = threading.Thread(target=churn)
    th.start()
    mine = []
    for i in range(rounds):
        t = torch.full((n,), float(i)) * 2
        mine.append(float(t.sum()))
    th.join()
    return mine, other


def numpy_image(side, value):
    """An image node in the shape most packs write them: the picture made with numpy (as PIL
    and OpenCV give it), scaled to float32 and wrapped with ``torch.from_numpy``."""
    import numpy as np

    pixels = np.full((side, side, 3), value, dtype=np.uint8)
    return torch.from_numpy(pixels.astype(np.float32) / 255.0).unsqueeze(0)

import ctypes
import fcntl
import os
import statistics
import time

import torch

from comfy_airlock import _native

N = 64 << 20
t = torch.rand(N // 4)
w = _native.WriteWatch.start(t.data_ptr(), N)


class Arg(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_uint64)
        for n in (
            "size",
            "flags",
            "start",
            "end",
            "walk_end",
            "vec",
            "vec_len",
            "max_pages",
            "inv",
            "mask",
            "anyof",
            "ret",
        )
    ]


class Reg(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint64), ("end", ctypes.c_uint64), ("cat", ctypes.c_uint64)]


IOC = (3 << 30) | (96 << 16) | (ord("f") << 8) | 16
fd = os.open("/proc/self/pagemap", os.O_RDONLY)
vec = (Reg * 1)()
lo = (t.data_ptr() + 4095) & ~4095
hi = (t.data_ptr() + N) & ~4095


def scan(mask, anyof, inv, ret, flags=0):
    a = Arg(96, flags, lo, hi, 0, ctypes.addressof(vec), 1, 0, inv, mask, anyof, ret)
    n = fcntl.ioctl(fd, IOC, a)  # returns int
    return n


libc = ctypes.CDLL(None, use_errno=True)


def scan2(mask, anyof, inv, ret, flags=0):
    a = Arg(96, flags, lo, hi, 0, ctypes.addressof(vec), 1, 0, inv, mask, anyof, ret)
    n = libc.ioctl(fd, ctypes.c_ulong(IOC), ctypes.byref(a))
    if n < 0:
        raise OSError(ctypes.get_errno(), "ioctl")
    return n


W, F, P, S = 2, 4, 8, 16
for label, args in (
    ("slow (ours)", (0, W | P | F, P, W | F | P | S)),
    ("fast WRITTEN", (W, 0, 0, W)),
):
    ts = []
    for _ in range(50):
        t0 = time.perf_counter_ns()
        n = scan2(*args)
        ts.append(time.perf_counter_ns() - t0)
    print(label, "found", n, f"median {statistics.median(ts) / 1e3:.0f} us")
t[12345] = 1.0
for label, args in (
    ("slow after write", (0, W | P | F, P, W | F | P | S)),
    ("fast after write", (W, 0, 0, W)),
):
    n = scan2(*args)
    print(label, "found", n, hex(vec[0].start - lo))

"""The steps of decoding one received 1 MiB tensor, each timed alone in a warm loop, in this
process (a memfd mapping standing in for a peer's segment): the ctypes view of the region,
the give-back registration (``weakref.finalize``, as before ADR 0047's day, and a weak
reference with a callback, as now), ``torch.frombuffer`` and a ``view``.

    .envs/bench/bin/python bench/results/issue20-per-tensor/probes/decode_steps.py
"""

import ctypes
import mmap
import os
import time
import weakref

import torch

N = 1 << 20
fd = os.memfd_create("probe")
os.ftruncate(fd, 32 << 20)
mm = mmap.mmap(fd, 32 << 20)
ARRAY = ctypes.c_char * N
LIVE: dict[int, weakref.ref] = {}


def per_call_us(f, k=20000):
    for _ in range(100):
        f()
    t0 = time.perf_counter_ns()
    for _ in range(k):
        f()
    return (time.perf_counter_ns() - t0) / k / 1000


def released(*_):
    pass


def view_only():
    ARRAY.from_buffer(mm, 0)


def with_finalize():
    buf = ARRAY.from_buffer(mm, 0)
    weakref.finalize(buf, released, 1, 2, 3, 4)


def with_weakref():
    buf = ARRAY.from_buffer(mm, 0)

    def gone(ref, live=LIVE):
        live.pop(id(ref), None)
        released(1, 2, 3, 4)

    ref = weakref.ref(buf, gone)
    LIVE[id(ref)] = ref


buf = ARRAY.from_buffer(mm, 0)
flat = torch.frombuffer(buf, dtype=torch.float32, count=N // 4)
steps = {
    "ctypes view of the region": per_call_us(view_only),
    "view + weakref.finalize": per_call_us(with_finalize),
    "view + weak reference with callback": per_call_us(with_weakref),
    "torch.frombuffer": per_call_us(
        lambda: torch.frombuffer(buf, dtype=torch.float32, count=N // 4)
    ),
    "view(shape) of a 4-d image": per_call_us(lambda: flat.view((1, 256, 256, 4))),
}
for name, us in steps.items():
    print(f"{name:38s} {us:6.2f} us")

"""One thread's memcpy of 1 MiB (glibc's, through ctypes.memmove) on this machine: from a
warm tensor or a fresh clone, into the heap or into a shared mapping (a memfd, as the pool's
segments are). The fresh_parts floor's copy is torch's copy_ (on every core).

    .envs/bench/bin/python bench/results/issue20-per-tensor/probes/memcpy_1mib.py
"""

import ctypes
import mmap
import os
import time

import torch

torch.set_num_threads(1)
N = 1 << 20
fd = os.memfd_create("probe")
os.ftruncate(fd, 32 << 20)
mm = mmap.mmap(fd, 32 << 20)
base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
ctypes.memset(base, 1, 32 << 20)
one = torch.rand(N // 4)
heap = torch.empty(N // 4)


def bench(label, make_src, dsts, k=3000):
    ns = []
    for i in range(k):
        s = make_src()
        d = dsts[i % len(dsts)]
        t0 = time.perf_counter_ns()
        ctypes.memmove(d, s.data_ptr(), N)
        ns.append(time.perf_counter_ns() - t0)
    ns.sort()
    print(f"{label:40s} p50 {ns[len(ns) // 2] / 1000:.1f} us")


bench("warm src -> heap", lambda: one, [heap.data_ptr()])
bench("warm src -> shm, 2 regions", lambda: one, [base, base + N])
bench("fresh clone -> shm, 2 regions", lambda: one.clone(), [base, base + N])
bench("fresh clone -> shm, 16 regions", lambda: one.clone(), [base + i * N for i in range(16)])
bench("fresh clone -> heap", lambda: one.clone(), [heap.data_ptr()])

"""A 12 MiB memmove into a populated memfd MAP_SHARED mapping and into anonymous memory, in
one process (median of 60 each, twice); output shmcopy.txt."""

import ctypes
import mmap
import os
import statistics
import time

import torch

N = 12 << 20
src = torch.rand(N // 4)
fd = os.memfd_create("t")
os.ftruncate(fd, N)
m = mmap.mmap(fd, N, mmap.MAP_SHARED)
buf = (ctypes.c_char * N).from_buffer(m)
shm_ptr = ctypes.addressof(buf)
ctypes.memset(shm_ptr, 1, N)
anon = torch.empty(N // 4)
anon.fill_(1)


def t(dst):
    ts = []
    for _ in range(60):
        t0 = time.perf_counter_ns()
        ctypes.memmove(dst, src.data_ptr(), N)
        ts.append(time.perf_counter_ns() - t0)
    return round(statistics.median(ts) / 1e6, 3)


for _ in range(2):
    print("into memfd shared", t(shm_ptr), "ms; into anon", t(anon.data_ptr()), "ms", flush=True)

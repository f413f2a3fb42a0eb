"""What one 12 MiB copy into shared memory costs the host's core (``lane.write``, the copy a
fresh input crossing makes), against torch's ``copy_`` of the same bytes into a pre-faulted
buffer in this process (median of 200 each). Run from the repository root with
.envs/bench/bin/python; output write_12mib.txt."""

import statistics
import sys
import time

import torch

import comfy_airlock

w = comfy_airlock.Worker(sys.executable, sys_path=["bench"], name="write12")
w.call("bench_targets:noop")
src = torch.rand(1, 1024, 1024, 3)
n = src.nbytes
lane = w.lane
dst = torch.empty_like(src)


def med(f, reps=200):
    ns = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        f()
        ns.append(time.perf_counter_ns() - t0)
    return round(statistics.median(ns) / 1e6, 3)


region = lane.alloc(n)


def write():
    lane.write(region, src.data_ptr(), n)


for _ in range(2):
    print({"lane.write (ms)": med(write), "torch copy_ (ms)": med(lambda: dst.copy_(src))})
lane.unalloc(*region)
w.close()

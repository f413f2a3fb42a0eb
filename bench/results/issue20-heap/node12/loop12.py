"""A fresh 1x1024x1024x3 IMAGE (a clone) sent to a warm worker that returns x * 1, in a loop for
ARGV[1] seconds; prints both pids first, then the calls made and ms a call. Profiled with
perf (worker_perf.txt)."""

import os
import sys
import time

import torch

import comfy_airlock

w = comfy_airlock.Worker(sys.executable, sys_path=["bench"], name="loop12")
w.call("bench_targets:import_torch")
src = torch.rand(1, 1024, 1024, 3)
print("worker", w.pid, "host", os.getpid(), flush=True)
end = time.time() + float(sys.argv[1])
n = 0
t0 = time.perf_counter()
while time.time() < end:
    x = src.clone()
    y = w.call("bench_targets:times_one", x)
    del x, y
    n += 1
print("calls", n, "ms/call", (time.perf_counter() - t0) / n * 1e3, flush=True)
w.close()

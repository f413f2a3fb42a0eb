"""An ImageInvert-like node (1 - x) and a 5x5 blur on a fresh 12 MiB IMAGE in a warm worker:
the call as the host times it, the operation as the worker times it, and the same operation
in this process (median of 60). Run from the repository root with .envs/bench/bin/python;
output node_split.txt."""

import statistics
import sys
import time

import torch

import comfy_airlock

sys.path.insert(0, __import__("os").path.dirname(__file__))
import node_ops as t2

w = comfy_airlock.Worker(
    sys.executable, sys_path=[__import__("os").path.dirname(__file__), "bench"], name="inv"
)
w.call("bench_targets:import_torch")
src = torch.rand(1, 1024, 1024, 3)
for fn in ("invert_timed", "blur_timed"):
    tot, inw, here = [], [], []
    for _ in range(60):
        x = src.clone()
        t0 = time.perf_counter_ns()
        y, c = w.call(f"node_ops:{fn}", x)
        tot.append(time.perf_counter_ns() - t0)
        inw.append(c)
        del y
        x = src.clone()
        _, c2 = getattr(t2, fn)(x)
        here.append(c2)

    def m(v):
        return round(statistics.median(v) / 1e6, 2)

    print(
        fn,
        "call total",
        m(tot),
        "ms; compute in worker",
        m(inw),
        "ms; same compute in-process",
        m(here),
        "ms",
    )
w.close()

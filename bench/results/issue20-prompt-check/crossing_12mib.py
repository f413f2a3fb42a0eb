"""A 1x1024x1024x3 float32 IMAGE (12 MiB) crossing a warm worker (torch imported): p50 in ms of
80 calls: no-op, a fresh input (its size back), the same input every call, a fresh output not
computed (empty_like), a fresh input echoed, x * 1 of a fresh input. Run from the repository
root with .envs/bench/bin/python; output crossing_12mib.txt."""

import statistics
import sys
import time

import torch

import comfy_airlock

w = comfy_airlock.Worker(sys.executable, sys_path=["bench"], name="parts12")
w.call("bench_targets:import_torch")
src = torch.rand(1, 1024, 1024, 3)


def p50(fn, mk, n=80):
    ns = []
    for _ in range(n):
        a = mk()
        t0 = time.perf_counter_ns()
        y = w.call(fn, *a)
        ns.append(time.perf_counter_ns() - t0)
        del y, a
    return round(statistics.median(ns) / 1e6, 3)


for _r in range(2):
    print(
        {
            "noop": p50("bench_targets:noop", lambda: ()),
            "in_fresh": p50("bench_targets:nbytes_of", lambda: (src.clone(),)),
            "in_same": p50("bench_targets:nbytes_of", lambda: (src,)),
            "out_empty_like": p50("bench_targets:empty_like", lambda: (src,)),
            "echo_fresh": p50("bench_targets:echo", lambda: (src.clone(),)),
            "times_one_fresh": p50("bench_targets:times_one", lambda: (src.clone(),)),
        }
    )
w.close()

"""The call with the host's own torch threads at 2 (its OpenMP thread spins after the clone
that makes each fresh input) and at 1 (nothing spins): run from the repo root with
.envs/bench/bin/python; output in host_threads.txt."""

import statistics
import sys
import time

import torch

import comfy_airlock

w = comfy_airlock.Worker(sys.executable, sys_path=["bench"], name="t1")
w.call("bench_targets:import_torch")
src = torch.rand(1 << 18)


def calls(fn, mk, n=2000):
    ns = []
    for _ in range(n):
        x = mk()
        t0 = time.perf_counter_ns()
        y = w.call(fn, x) if x is not None else w.call(fn)
        ns.append(time.perf_counter_ns() - t0)
        del x, y
    return round(statistics.median(ns) / 1e3, 1)


for th in (2, 1, 2, 1):
    torch.set_num_threads(th)
    print(
        th,
        {
            "noop": calls("bench_targets:noop", lambda: None),
            "input": calls("bench_targets:nbytes_of", src.clone),
            "same": calls("bench_targets:nbytes_of", lambda: src),
            "fresh": calls("bench_targets:times_one", src.clone),
        },
    )
w.close()

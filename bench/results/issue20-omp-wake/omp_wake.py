"""What one torch operator on 1 MiB costs in a process alone, by OpenMP wait policy and thread
count (issue 20, item 1: the worker's ``x * 1``). Run once per setting, e.g.

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python omp_wake.py       # a worker's default (ADR 0028)
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python omp_wake.py 1     # the same, one thread
    .venv/bin/python omp_wake.py                               # libgomp's default (spins)

Prints the median of 2000 ``x * 1`` on a 1 MiB float32 tensor: back to back (``hot``), and
after a 150 µs and a 1 ms sleep before each (the gap a call leaves between a node's operators
and the next call's). Run under ``perf stat -e context-switches`` to count the wake-ups."""

import os
import statistics
import sys
import time

import torch

n = (1 << 20) // 4
src = torch.rand(n)
threads = int(sys.argv[1]) if len(sys.argv) > 1 else 0
if threads:
    torch.set_num_threads(threads)


def run(gap: float) -> float:
    ns = []
    for _ in range(2000):
        if gap:
            time.sleep(gap)
        t0 = time.perf_counter_ns()
        y = src * 1
        ns.append(time.perf_counter_ns() - t0)
        del y
    return round(statistics.median(ns) / 1e3, 1)


policy = os.environ.get("OMP_WAIT_POLICY") or (
    f"GOMP_SPINCOUNT={os.environ['GOMP_SPINCOUNT']}"
    if "GOMP_SPINCOUNT" in os.environ
    else "default"
)
print(
    f"{policy:>22} threads={threads or torch.get_num_threads()} "
    f"hot={run(0)} gap150us={run(150e-6)} gap1ms={run(1e-3)}  (µs, median of 2000)"
)

"""3000 ``x * 1`` on a 1 MiB float32 tensor back to back, for ``perf stat`` and ``perf record -e
sched:sched_switch`` (omp_wake.txt's companion): how often the threads switch per operator."""

import os
import statistics
import time

import torch

src = torch.rand((1 << 20) // 4)
ns = []
for _ in range(3000):
    t0 = time.perf_counter_ns()
    y = src * 1
    ns.append(time.perf_counter_ns() - t0)
    del y
print(
    os.environ.get("OMP_WAIT_POLICY") or "default",
    "hot",
    round(statistics.median(ns) / 1e3, 1),
    "µs",
)

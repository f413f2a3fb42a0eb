"""A fresh 1 MiB output, a 1 MiB tensor made in the worker, and a no-op, with the worker's torch
on one thread and on two (its OpenMP threads passive, ADR 0028): 16 alternating batches of 300
calls in one worker, the median of the batch medians per setting.

    .venv/bin/python bench/results/issue20-second-send/threads_probe.py
"""

import statistics
import sys
import time
from pathlib import Path

import torch

import comfy_airlock

BENCH = Path(__file__).resolve().parents[2]


def main() -> None:
    with comfy_airlock.Worker(sys.executable, sys_path=[str(BENCH)], name="threads") as w:
        w.call("bench_targets:times_one", torch.ones(4))
        src = torch.rand(1 << 18)

        def batch(fn, args, reps=300):
            ts = []
            for _ in range(reps):
                a = args()
                t0 = time.perf_counter_ns()
                y = w.call(f"bench_targets:{fn}", *a)
                ts.append(time.perf_counter_ns() - t0)
                del y, a
            return statistics.median(ts) / 1e3

        rows = {1: {}, 2: {}}
        for _ in range(16):
            for threads in (1, 2):
                w.call("bench_targets:set_threads", threads)
                for name, fn, args in (
                    ("fresh x*1 1 MiB", "times_one", lambda: (src.clone(),)),
                    ("make 1 MiB", "make", lambda: (1 << 20,)),
                    ("no-op", "noop", lambda: ()),
                ):
                    rows[threads].setdefault(name, []).append(batch(fn, args))
        for threads, row in rows.items():
            figures = {k: f"{statistics.median(v):.0f} us" for k, v in row.items()}
            print(f"worker threads {threads}: {figures}", flush=True)


if __name__ == "__main__":
    main()

"""Fresh 1 MiB outputs right after a worker sat idle (the idle trim gives its memory back after
5 s): per-call times of 8 calls after 0, 6 and 6 s idle, each batch after one untimed call, as
bench/compare.py's batches start. Run with the host's OpenMP threads passive:

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/results/issue20-second-send/warmup_probe.py
"""

import sys
import time
from pathlib import Path

import torch

import comfy_airlock

BENCH = Path(__file__).resolve().parents[2]


def main() -> None:
    with comfy_airlock.Worker(sys.executable, sys_path=[str(BENCH)], name="warmup") as w:
        w.call("bench_targets:times_one", torch.ones(4))
        src = torch.rand(1 << 18)
        for gap in (0, 6, 6):
            time.sleep(gap)
            w.call("bench_targets:times_one", src.clone())
            us = []
            for _ in range(8):
                x = src.clone()
                t0 = time.perf_counter_ns()
                y = w.call("bench_targets:times_one", x)
                us.append(round((time.perf_counter_ns() - t0) / 1e3))
                del x, y
            print(f"after {gap} s idle: {us} us", flush=True)


if __name__ == "__main__":
    main()

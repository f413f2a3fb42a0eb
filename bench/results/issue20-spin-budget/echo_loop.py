"""Median host-side time of a warm call to a bare worker (no torch import in the call), 300
calls each: a no-op, a 1 MiB float32 tensor sent again and echoed (its kept copy reused), eight
such tensors in turn, and a fresh tensor each call. Run once per AIRLOCK_LANE_SPIN_US:

    for s in 0 50 100 200 400; do AIRLOCK_LANE_SPIN_US=$s .venv/bin/python echo_loop.py; done
"""

import statistics
import sys
import time
from pathlib import Path

import torch

import comfy_airlock

HELPERS = str(Path(__file__).resolve().parents[3] / "tests" / "helpers")
N = 262144  # float32: 1 MiB


def main() -> None:
    w = comfy_airlock.Worker(sys.executable, sys_path=[HELPERS], name="probe")
    xs = [torch.rand(N) for _ in range(8)]
    for x in xs:
        w.call("airlock_testpack:echo", x)

    def median_us(make) -> float:
        ts = []
        for i in range(300):
            x = make(i)
            t = time.perf_counter()
            w.call("airlock_testpack:echo", x)
            ts.append(time.perf_counter() - t)
        return statistics.median(ts) * 1e6

    rows = {
        "noop": median_us(lambda i: 1),
        "same tensor": median_us(lambda i: xs[0]),
        "rotating 8": median_us(lambda i: xs[i % 8]),
        "fresh": median_us(lambda i: torch.rand(N)),
    }
    print("  ".join(f"{k} {v:.1f} us" for k, v in rows.items()))
    w.close()


if __name__ == "__main__":
    main()

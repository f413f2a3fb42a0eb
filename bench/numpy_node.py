"""A node that makes its output with numpy (``bench_targets.numpy_half``: ``x * 0.5`` in numpy,
wrapped with ``torch.from_numpy``), births on and off (ADR 0045): the median time of a call
that sends a fresh IMAGE-sized tensor and gets the numpy-made output back, at 1, 12 and 64 MiB.
With births off (``AIRLOCK_BORN_MIB=0``) the output is copied into the pool, as every numpy
output was before ADR 0045. Each setting runs in its own process, alternating, ``--runs``
times; one line per run, the machine's load before and after. A quick A/B, not a comparison
with peers (that is bench/compare.py).

    .envs/bench/bin/python bench/numpy_node.py [--runs 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
SIZES = ((1 << 20, 1000), (12 << 20, 200), (64 << 20, 40))


def one_run(label: str) -> str:
    import torch

    import comfy_airlock

    with comfy_airlock.Worker(sys.executable, sys_path=[str(BENCH)], name="numpy-node") as w:
        w.call("bench_targets:numpy_half", torch.ones(4))
        out = []
        for n, reps in SIZES:
            src = torch.rand(n // 4)
            expect = src * 0.5
            ts = []
            for _ in range(reps):
                x = src.clone()
                t0 = time.perf_counter_ns()
                y = w.call("bench_targets:numpy_half", x)
                ts.append(time.perf_counter_ns() - t0)
                del x
            assert torch.equal(y, expect)
            del y
            out.append(f"{n >> 20} MiB {statistics.median(ts) / 1e3:.0f} us")
    return f"{label}: " + "; ".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(one_run(args.child), flush=True)
        return
    from comfy_airlock.settings import ENV

    print(f"load average at start: {os.getloadavg()}", flush=True)
    for _ in range(args.runs):
        for label, mib in (("births on", "1024"), ("births off", "0")):
            env = {**os.environ, ENV["born_budget"]: mib}
            subprocess.run([sys.executable, __file__, "--child", label], env=env, check=True)
    print(f"load average at end: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()

"""What sending a fresh tensor costs, with kept copies on and off (ADR 0034): the median time
of a call that sends a fresh tensor and gets an int back (``nbytes_of``), and of one that gets
a fresh output back (``times_one``), at 1 MiB (1,000 calls) and 64 MiB (40 calls). Each setting
runs in its own process (the ``keep_sent`` setting is read once), alternating, ``--runs``
times; one line per run. A quick check while changing the send path, not a comparison with
peers (that is bench/compare.py).

    .venv/bin/python bench/send_cost.py [--runs 3]
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
SIZES = ((1 << 20, 1000), (64 << 20, 40))


def one_run(label: str) -> str:
    import torch

    import comfy_airlock

    with comfy_airlock.Worker(sys.executable, sys_path=[str(BENCH)], name="send-cost") as w:
        w.call("bench_targets:times_one", torch.ones(4))
        out = []
        for n, reps in SIZES:
            src = torch.rand(n // 4)
            for fn in ("nbytes_of", "times_one"):
                ts = []
                for _ in range(reps):
                    x = src.clone()
                    t0 = time.perf_counter_ns()
                    y = w.call(f"bench_targets:{fn}", x)
                    ts.append(time.perf_counter_ns() - t0)
                    del x, y
                out.append(f"{n >> 20} MiB {fn} {statistics.median(ts) / 1e3:.0f} us")
    return f"{label}: " + "; ".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(one_run(args.child), flush=True)
        return
    from comfy_airlock.settings import ENV

    print(f"load average at start: {os.getloadavg()}", flush=True)
    for _ in range(args.runs):
        for label, mib in (("keep on", "1024"), ("keep off", "0")):
            env = {**os.environ, ENV["keep_sent"]: mib}
            subprocess.run([sys.executable, __file__, "--child", label], env=env, check=True)
    print(f"load average at end: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()

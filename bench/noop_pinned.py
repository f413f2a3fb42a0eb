"""A quick no-op call figure: host and worker pinned to one CPU, 20,000 warm calls, p50/p90.
The full comparison is bench/compare.py; this is the one-minute check used while changing the
call path (docs/benchmarks.md, "Improvements").

    .venv/bin/python bench/noop_pinned.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

HELPERS = Path(__file__).resolve().parents[1] / "tests" / "helpers"
sys.path.insert(0, str(HELPERS))

import comfy_airlock  # noqa: E402


def main(calls: int = 20_000) -> None:
    os.sched_setaffinity(0, {0})
    with comfy_airlock.Worker(sys.executable, sys_path=[str(HELPERS)]) as w:
        w.call("airlock_testpack:echo", 1)
        os.sched_setaffinity(w.pid, {0})
        for _ in range(2000):
            w.call("airlock_testpack:echo", 1)
        ts = []
        for _ in range(calls):
            t0 = time.perf_counter_ns()
            w.call("airlock_testpack:echo", 1)
            ts.append(time.perf_counter_ns() - t0)
    ts.sort()
    print(f"no-op p50 {ts[len(ts) // 2] / 1000:.1f} us, p90 {ts[int(len(ts) * 0.9)] / 1000:.1f} us")


if __name__ == "__main__":
    main()

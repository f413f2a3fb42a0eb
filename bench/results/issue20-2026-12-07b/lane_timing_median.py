"""A no-op's p50 on CPU 0 (20,000 warm calls) and the medians of the host lane's spin state,
read every 200th call."""

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lane_timing import pinned_worker


def main() -> None:
    w = pinned_worker()
    call = w.call
    for _ in range(3000):
        call("bench_targets:noop")
    ts, lw = [], []
    for i in range(20000):
        t0 = time.perf_counter_ns()
        call("bench_targets:noop")
        ts.append(time.perf_counter_ns() - t0)
        if i % 200 == 0:
            lw.append(w._native.lane_timing())
    ts.sort()

    def med(key: str) -> float:
        return statistics.median(x[key] for x in lw)

    print(
        "p50",
        ts[len(ts) // 2] / 1000,
        "spin_us",
        med("spin_us"),
        "wake",
        med("wake_us"),
        "last_wait",
        med("last_wait_us"),
        "max lw",
        max(x["last_wait_us"] for x in lw),
    )


if __name__ == "__main__":
    main()

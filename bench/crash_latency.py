"""How fast a worker's death reaches a caller blocked on it: SIGKILL the worker mid-call and
time until `WorkerDied` is raised in the host, and until the next call (a new generation)
returns. Run: `.venv/bin/python bench/crash_latency.py [N]`."""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from pathlib import Path

import comfy_airlock

HELPERS = str(Path(__file__).resolve().parent.parent / "tests" / "helpers")


def main(n: int) -> None:
    w = comfy_airlock.Worker(sys.executable, sys_path=[HELPERS], name="crash")
    w.call("airlock_testpack:echo", 0)
    detect, respawn = [], []
    for _ in range(n):
        pid = w.pid
        stamp = []

        def killer(pid=pid, stamp=stamp):
            time.sleep(0.2)
            stamp.append(time.perf_counter())
            os.kill(pid, 9)

        threading.Thread(target=killer).start()
        try:
            w.call("airlock_testpack:sleep", 30)
        except comfy_airlock.WorkerDied:
            detect.append(time.perf_counter() - stamp[0])
        t0 = time.perf_counter()
        w.call("airlock_testpack:echo", 1)
        respawn.append(time.perf_counter() - t0)
    w.close()
    detect.sort()
    print(
        f"SIGKILL -> WorkerDied in the host, {n} kills: p50 {statistics.median(detect) * 1e3:.1f} ms,"
        f" max {detect[-1] * 1e3:.1f} ms"
    )
    print(f"next call (respawn + handshake + call): p50 {statistics.median(respawn) * 1e3:.0f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)

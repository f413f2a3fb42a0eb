"""How fast a worker's death reaches a caller blocked on it: SIGKILL the worker mid-call and
time until `WorkerDied` is raised in the host, and until the next call (a new generation)
returns. Run: `.venv/bin/python bench/crash_latency.py [N]`; `bench/run.py` calls `measure`
once per run, after its rounds."""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from pathlib import Path

import comfy_airlock

HELPERS = str(Path(__file__).resolve().parent.parent / "tests" / "helpers")
KILL_AFTER_S = 0.2  # the worker is inside `sleep(30)` by then


def measure(n: int, python: str | os.PathLike = sys.executable) -> dict:
    """Kills the worker ``n`` times, each during a call that would sleep 30 s.

    Returns the samples in ns: ``detect_ns`` from just before ``os.kill`` (in a helper thread)
    to the ``except WorkerDied`` in the blocked caller, and ``respawn_ns`` for the next call
    (respawn + handshake + call), plus the generations seen.
    """
    w = comfy_airlock.Worker(python, sys_path=[HELPERS], name="crash")
    w.call("airlock_testpack:echo", 0)
    detect, respawn = [], []
    gen_first = w.generation
    try:
        for _ in range(n):
            pid = w.pid
            stamp: list[int] = []

            def killer(pid=pid, stamp=stamp):
                time.sleep(KILL_AFTER_S)
                stamp.append(time.perf_counter_ns())
                os.kill(pid, 9)

            t = threading.Thread(target=killer)
            t.start()
            try:
                w.call("airlock_testpack:sleep", 30)
            except comfy_airlock.WorkerDied:
                detect.append(time.perf_counter_ns() - stamp[0])
            else:
                raise RuntimeError("the call returned although its worker was killed")
            finally:
                t.join()
            t0 = time.perf_counter_ns()
            w.call("airlock_testpack:echo", 1)
            respawn.append(time.perf_counter_ns() - t0)
        gen_last = w.generation
    finally:
        w.close()
    return {
        "kills": n,
        "detect_ns": detect,
        "respawn_ns": respawn,
        "generation_first": gen_first,
        "generation_last": gen_last,
    }


def main(n: int) -> None:
    r = measure(n)
    detect = sorted(r["detect_ns"])
    respawn = r["respawn_ns"]
    print(
        f"SIGKILL -> WorkerDied in the host, {n} kills: p50 {statistics.median(detect) / 1e6:.1f} ms,"
        f" max {detect[-1] / 1e6:.1f} ms"
    )
    print(f"next call (respawn + handshake + call): p50 {statistics.median(respawn) / 1e6:.0f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)

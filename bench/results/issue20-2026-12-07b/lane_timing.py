"""The host lane's spin state after warm no-op calls, host and worker on CPU 0: every 1000th
call, and each of the last nine."""

import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(BENCH))

import comfy_airlock  # noqa: E402


def pinned_worker() -> comfy_airlock.Worker:
    """A worker with ComfyUI's core imported, it and this process on CPU 0."""
    os.sched_setaffinity(0, {0})
    w = comfy_airlock.Worker(sys.executable, sys_path=[str(BENCH)], name="probe")
    w.call("bench_targets:import_comfy", os.environ["COMFYUI_DIR"])
    for t in os.listdir(f"/proc/{w.pid}/task"):
        os.sched_setaffinity(int(t), {0})
    return w


def main() -> None:
    w = pinned_worker()
    for i in range(5000):
        w.call("bench_targets:noop")
        if i % 1000 == 999 or i > 4990:
            print(w._native.lane_timing())


if __name__ == "__main__":
    main()

"""Floor and airlock no-op p50 on one CPU, in one run (PYTHONPATH picks the build).

TAG=old PYTHONPATH=/tmp/v/old .envs/bench/bin/python bench/results/issue20-2026-12-07b/ab.py
"""

import os
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(BENCH))

import run as base  # noqa: E402  (bench/run.py: the floor)

import comfy_airlock  # noqa: E402

COMFY = os.environ["COMFYUI_DIR"]
N = int(os.environ.get("N", "20000"))


def main() -> None:
    os.sched_setaffinity(0, {0})
    fl = sorted(base.native_pingpong(N, 2000, {0}))
    w = comfy_airlock.Worker(sys.executable, sys_path=[str(BENCH)], name="probe")
    w.call("bench_targets:import_comfy", COMFY)
    for t in os.listdir(f"/proc/{w.pid}/task"):
        os.sched_setaffinity(int(t), {0})
    call = w.call
    for _ in range(3000):
        call("bench_targets:noop")
    ts = []
    clock = time.perf_counter_ns
    for _ in range(N):
        t0 = clock()
        call("bench_targets:noop")
        ts.append(clock() - t0)
    ts.sort()
    w.close()
    f, a = fl[len(fl) // 2] / 1000, ts[len(ts) // 2] / 1000
    load = Path("/proc/loadavg").read_text().split()[0]
    tag = os.environ.get("TAG", "")
    print(
        f"{tag} floor {f:.2f} airlock {a:.2f} ratio {a / f:.3f} load {load} src {comfy_airlock.__file__}"
    )


if __name__ == "__main__":
    main()

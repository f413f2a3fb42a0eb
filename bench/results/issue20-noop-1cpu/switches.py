"""Run from the repo root with .envs/bench/bin/python; its output is the .txt of the same name."""

import os
import statistics
import sys
import time

sys.path.insert(0, "tests/helpers")
import comfy_airlock


def cs(pid):
    tot = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{t}/status") as fh:
            for line in fh:
                if "ctxt_switches" in line:
                    tot += int(line.split()[1])
    return tot


os.sched_setaffinity(0, {0})
w = comfy_airlock.Worker(sys.executable, sys_path=["tests/helpers"])
w.call("airlock_testpack:echo", 1)
os.sched_setaffinity(w.pid, {0})
for _ in range(2000):
    w.call("airlock_testpack:echo", 1)
N = 20000
h0, w0 = cs(os.getpid()), cs(w.pid)
ts = []
for _ in range(N):
    t0 = time.perf_counter_ns()
    w.call("airlock_testpack:echo", 1)
    ts.append(time.perf_counter_ns() - t0)
h1, w1 = cs(os.getpid()), cs(w.pid)
print(
    "p50",
    statistics.median(ts) / 1e3,
    "host cs/call",
    (h1 - h0) / N,
    "worker cs/call",
    (w1 - w0) / N,
)
w.close()

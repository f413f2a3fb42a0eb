"""The no-op call with host and worker on one CPU, for a plain worker, one that imported torch and
one that imported ComfyUI's core (what issue 20's item 2 asks about), beside the socketpair floor
measured in the same run (bench/run.py's). Run from the repo root with .envs/bench/bin/python;
its output is noop_comfy.txt."""

import os
import statistics
import sys
import time

sys.path.insert(0, "bench")
import run

import comfy_airlock

COMFY = os.path.abspath(".cache/comfyui/0.30.0/ComfyUI")
os.sched_setaffinity(0, {0})
ws = {}
for kind in ("plain", "torch", "comfy"):
    w = comfy_airlock.Worker(sys.executable, sys_path=[os.path.abspath("bench")], name=f"n-{kind}")
    if kind == "torch":
        w.call("bench_targets:import_torch")
    if kind == "comfy":
        w.call("bench_targets:import_comfy", COMFY)
    w.call("bench_targets:noop")
    os.sched_setaffinity(w.pid, {0})
    ws[kind] = w


def p50(w, n=20000):
    for _ in range(1000):
        w.call("bench_targets:noop")
    ts = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        w.call("bench_targets:noop")
        ts.append(time.perf_counter_ns() - t0)
    return round(statistics.median(ts) / 1e3, 2)


def floor(n=20000):
    return round(statistics.median(run.native_pingpong(n, 1000, {0})) / 1e3, 2)


for _ in range(3):
    row = {"floor": floor(), **{k: p50(w) for k, w in ws.items()}}
    row["comfy/floor"] = round(row["comfy"] / row["floor"], 2)
    print(row, flush=True)
for w in ws.values():
    w.close()

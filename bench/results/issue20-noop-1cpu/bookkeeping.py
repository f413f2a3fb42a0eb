"""The per-call bookkeeping of a worker with ComfyUI's core imported, timed inside the worker (ns per
call, 100,000 calls each). Run: .envs/bench/bin/python bench/results/issue20-noop-1cpu/bookkeeping.py;
output in bookkeeping.txt."""

import time


def bookkeeping(n=100000):
    from comfy_airlock.worker import models, ram, runtime

    out = {}
    t0 = time.perf_counter_ns()
    for _ in range(n):
        models.active()
    out["active"] = (time.perf_counter_ns() - t0) / n
    t0 = time.perf_counter_ns()
    for _ in range(n):
        models.begin_call()
    out["begin"] = (time.perf_counter_ns() - t0) / n
    t0 = time.perf_counter_ns()
    for _ in range(n):
        models._signature()
    out["signature"] = (time.perf_counter_ns() - t0) / n
    t0 = time.perf_counter_ns()
    for _ in range(n):
        models.end_call()
    out["end"] = (time.perf_counter_ns() - t0) / n
    t0 = time.perf_counter_ns()
    for _ in range(n):
        ram.enter()
        ram.leave()
    out["ram"] = (time.perf_counter_ns() - t0) / n
    f = runtime._resolve("bench_targets:noop")
    t0 = time.perf_counter_ns()
    for _ in range(n):
        f()
    out["wrapped_noop"] = (time.perf_counter_ns() - t0) / n
    import bench_targets

    t0 = time.perf_counter_ns()
    for _ in range(n):
        bench_targets.noop()
    out["bare_noop"] = (time.perf_counter_ns() - t0) / n
    return {k: round(v, 1) for k, v in out.items()}


if __name__ == "__main__":
    import os
    import sys

    import comfy_airlock

    here = os.path.dirname(os.path.abspath(__file__))
    w = comfy_airlock.Worker(
        sys.executable, sys_path=[os.path.abspath("bench"), here], name="bookkeeping"
    )
    w.call("bench_targets:import_comfy", os.path.abspath(".cache/comfyui/0.30.0/ComfyUI"))
    for _ in range(3):
        print(w.call("bookkeeping:bookkeeping"), flush=True)
    w.close()

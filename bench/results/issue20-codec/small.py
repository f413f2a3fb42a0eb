"""Small tensors crossing: a warm worker (torch imported), p50 of 3,000 calls per figure, in µs.
``noop``; ``one_in``: one fresh 16 KiB tensor sent, its size back; ``one_echo``: sent and
returned (by reference); ``list8_echo``: eight of them in a list; ``dict64_echo``: the harness's
row, 64 tensors of 16 KiB in a dict. Run from the repository root with .envs/bench/bin/python."""

import statistics
import sys
import time

import torch

import comfy_airlock

w = comfy_airlock.Worker(sys.executable, sys_path=["bench"], name="small")
w.call("bench_targets:import_torch")
src = torch.rand(4096)


def p50(fn, make, n=3000):
    ns = []
    for _ in range(n):
        a = make()
        t0 = time.perf_counter_ns()
        y = w.call(fn, *a)
        ns.append(time.perf_counter_ns() - t0)
        del y, a
    return round(statistics.median(ns) / 1e3, 1)


for _ in range(2):
    print(
        {
            "noop": p50("bench_targets:noop", lambda: ()),
            "one_in": p50("bench_targets:nbytes_of", lambda: (src.clone(),)),
            "one_echo": p50("bench_targets:echo", lambda: (src.clone(),)),
            "list8_echo": p50("bench_targets:echo", lambda: ([src.clone() for _ in range(8)],)),
            "dict64_echo": p50(
                "bench_targets:echo",
                lambda: ({f"t{i}": src.clone() for i in range(64)},),
                n=500,
            ),
        },
        flush=True,
    )
w.close()

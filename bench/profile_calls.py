"""The call loops bench/profile.sh profiles: comfy-airlock's warm no-op call, its 64 MiB
tensor round trip, the same 1 MiB tensor
sent on every call (``kept1``: kept in shared memory from its second send), a fresh 1 MiB
input whose size comes back (``input1``), a dict of 64 fresh 16 KiB tensors echoed
(``small64``), or a fresh 1 MiB output (the worker returns ``x * 1`` of a fresh input, as
the benchmark's row does), repeated for a while. Prints the worker's pid first (for a second profiler
attached to the worker), then waits ``--settle`` seconds so that profiler can attach.

    .envs/bench/bin/python bench/profile_calls.py noop --seconds 10
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("noop", "echo64", "fresh1", "kept1", "input1", "small64"))
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--settle", type=float, default=2.0)
    args = ap.parse_args()
    import torch

    import comfy_airlock

    w = comfy_airlock.Worker(sys.executable, sys_path=[str(BENCH)], name="profile")
    w.call("bench_targets:import_torch")
    x = torch.rand(16 << 20)
    for _ in range(3):
        w.call("bench_targets:echo", x)
    print(w.pid, flush=True)
    time.sleep(args.settle)
    ns, end = [], time.perf_counter() + args.seconds
    clock = time.perf_counter_ns
    if args.mode == "noop":
        call = w.call
        while time.perf_counter() < end:
            t0 = clock()
            call("bench_targets:noop")
            ns.append(clock() - t0)
    elif args.mode == "fresh1":
        src = torch.rand(1 << 18)
        while time.perf_counter() < end:
            x1 = src.clone()
            t0 = clock()
            y = w.call("bench_targets:times_one", x1)
            ns.append(clock() - t0)
            del y, x1
    elif args.mode == "input1":
        src = torch.rand(1 << 18)
        while time.perf_counter() < end:
            x1 = src.clone()
            t0 = clock()
            y = w.call("bench_targets:nbytes_of", x1)
            ns.append(clock() - t0)
            del x1
    elif args.mode == "small64":
        small = {f"t{i}": torch.rand(4096) for i in range(64)}
        while time.perf_counter() < end:
            d = {k: t.clone() for k, t in small.items()}
            t0 = clock()
            y = w.call("bench_targets:echo", d)
            ns.append(clock() - t0)
            del d, y
    elif args.mode == "kept1":
        src = torch.rand(1 << 18)
        while time.perf_counter() < end:
            t0 = clock()
            y = w.call("bench_targets:nbytes_of", src)
            ns.append(clock() - t0)
    else:
        while time.perf_counter() < end:
            t0 = clock()
            y = w.call("bench_targets:echo", x)
            ns.append(clock() - t0)
            del y
    w.close()
    print(
        f"{args.mode}: {len(ns)} calls, p50 {statistics.median(ns) / 1e3:.1f} us",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()

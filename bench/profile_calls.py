"""The call loops bench/profile.sh profiles, each repeated for a while: comfy-airlock's warm
no-op call (``noop``), its 64 MiB tensor round trip (``echo64``), a fresh 1 MiB output (the
worker returns ``x * 1`` of a fresh input, as the benchmark's row does: ``fresh1``), the same
1 MiB tensor sent on every call (``kept1``: kept in shared memory from its second send), a
fresh 1 MiB input whose size comes back (``input1``), a dict of 64 fresh 16 KiB tensors
echoed (``small64``). Prints the worker's pid first (for a second profiler attached to the
worker), then waits ``--settle`` seconds so that profiler can attach.

    .envs/bench/bin/python bench/profile_calls.py noop --seconds 10
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def modes(torch) -> dict[str, tuple[str, object]]:
    """Each mode's call target and what makes its arguments (a fresh tensor is made before
    the clock starts)."""
    one, small = torch.rand(1 << 18), {f"t{i}": torch.rand(4096) for i in range(64)}
    big = torch.rand(16 << 20)
    return {
        "noop": ("bench_targets:noop", lambda: ()),
        "echo64": ("bench_targets:echo", lambda: (big,)),
        "fresh1": ("bench_targets:times_one", lambda: (one.clone(),)),
        "kept1": ("bench_targets:nbytes_of", lambda: (one,)),
        "input1": ("bench_targets:nbytes_of", lambda: (one.clone(),)),
        "small64": ("bench_targets:echo", lambda: ({k: t.clone() for k, t in small.items()},)),
    }


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
    target, make = modes(torch)[args.mode]
    for _ in range(3):
        w.call(target, *make())
    print(w.pid, flush=True)
    time.sleep(args.settle)
    ns, end = [], time.perf_counter() + args.seconds
    clock, call = time.perf_counter_ns, w.call
    while time.perf_counter() < end:
        a = make()
        t0 = clock()
        y = call(target, *a)
        ns.append(clock() - t0)
        del a, y
    w.close()
    print(
        f"{args.mode}: {len(ns)} calls, p50 {statistics.median(ns) / 1e3:.1f} us",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()

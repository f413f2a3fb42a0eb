"""What OpenMP's wait policy costs on a shared machine: a worker's own operators, and a 1 MiB
fresh output round trip, under each policy of the worker's threads, in one run (ADR 0028).

    .venv/bin/python bench/threads.py [--rounds 4] [--out bench/out/threads.json]

Worker variants (the environment each worker starts with; the host is this process, with
whatever policy it was started with: run it again with ``OMP_WAIT_POLICY=PASSIVE`` for a host
that does not spin either):

- ``spin``: ``OMP_WAIT_POLICY=ACTIVE`` (OpenMP's spinning, what a worker had before);
- ``passive``: comfy-airlock's default for workers (``OMP_WAIT_POLICY=PASSIVE``);
- ``spin10k``: ``GOMP_SPINCOUNT=10000`` (libgomp spins briefly, then sleeps);
- ``one_thread``: ``OMP_NUM_THREADS=1`` (no helper threads at all).

Rows: an elementwise op on 1 MiB and on 64 KiB inside the worker (µs per op: many small
parallel regions), a 1024² matmul inside the worker (ms: one large one), and a 1 MiB fresh
output round trip (``times_one``, ms) with the host's in-process ``x * 1`` + copy as its floor.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
VARIANTS = {
    "spin": {"OMP_WAIT_POLICY": "ACTIVE"},
    "passive": {},
    "spin10k": {"GOMP_SPINCOUNT": "10000"},
    "one_thread": {"OMP_NUM_THREADS": "1"},
}
MiB = 1 << 20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", type=Path, default=BENCH / "out" / "threads.json")
    args = ap.parse_args()
    import torch

    import comfy_airlock

    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    workers = {}
    for name, extra in VARIANTS.items():
        w = comfy_airlock.Worker(
            sys.executable, sys_path=[str(BENCH)], name=f"threads-{name}", env={**base, **extra}
        )
        w.call("bench_targets:import_torch")
        workers[name] = w
    x = torch.rand(MiB // 4)
    rows: dict[str, dict[str, list[float]]] = {}
    load = [os.getloadavg()[0]]
    try:
        for r in range(args.rounds):
            names = list(workers)
            names = names[r % len(names) :] + names[: r % len(names)]
            for name in names:
                w = workers[name]
                row = rows.setdefault(name, {})
                row.setdefault("op_1MiB_us", []).append(
                    w.call("bench_targets:compute_loop", MiB, 300) / 300 * 1e6
                )
                row.setdefault("op_64KiB_us", []).append(
                    w.call("bench_targets:compute_loop", 64 << 10, 1000) / 1000 * 1e6
                )
                row.setdefault("matmul_1024_ms", []).append(
                    w.call("bench_targets:matmul_loop", 1024, 5) / 5 * 1e3
                )
                ts = []
                for _ in range(25):
                    a = x.clone()
                    t0 = time.perf_counter()
                    y = w.call("bench_targets:times_one", a)
                    ts.append(time.perf_counter() - t0)
                    del y, a
                row.setdefault("fresh_1MiB_ms", []).append(statistics.median(ts) * 1e3)
            ts = []
            dst = torch.empty(MiB // 4)
            for _ in range(25):
                a = x.clone()
                t0 = time.perf_counter()
                dst.copy_(a * 1)
                ts.append(time.perf_counter() - t0)
            rows.setdefault("floor", {}).setdefault("fresh_1MiB_ms", []).append(
                statistics.median(ts) * 1e3
            )
            load.append(os.getloadavg()[0])
            print(f"round {r + 1}: load {load[-1]:.2f}", file=sys.stderr)
    finally:
        for w in workers.values():
            w.close()
    result = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host_omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset: spins)"),
        "host_torch_threads": torch.get_num_threads(),
        "loadavg_1min": load,
        "rows": rows,
        "median": {v: {k: statistics.median(x) for k, x in r.items()} for v, r in rows.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"host OMP_WAIT_POLICY {result['host_omp_wait_policy']}; load {load}")
    for v, r in rows.items():
        for k, xs in r.items():
            print(
                f"  {v:10s} {k:15s} median {statistics.median(xs):9.3f}  rounds "
                + " ".join(f"{t:.3f}" for t in xs)
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

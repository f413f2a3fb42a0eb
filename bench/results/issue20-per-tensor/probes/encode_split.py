"""How much of the host's encode of a fresh 1 MiB input is the codec's ``_encode_torch`` (its
copy into shared memory included) and the kept-copy check inside it: each wrapped with a
clock, 3000 calls (the first 500 not counted) of a worker that returns ``empty_like``.

    .envs/bench/bin/python bench/results/issue20-per-tensor/probes/encode_split.py
"""

import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(BENCH))

import torch  # noqa: E402

import comfy_airlock  # noqa: E402
from comfy_airlock import kept, values  # noqa: E402

T: dict[str, list[int]] = {}


def wrap(mod, name):
    f = getattr(mod, name)

    def timed(*a, **k):
        t0 = time.perf_counter_ns()
        try:
            return f(*a, **k)
        finally:
            T.setdefault(name, []).append(time.perf_counter_ns() - t0)

    setattr(mod, name, timed)


wrap(values, "_encode_torch")
wrap(kept, "region_for")
w = comfy_airlock.Worker(sys.executable, sys_path=[str(BENCH)], name="encode-split")
w.call("bench_targets:import_torch")
one = torch.rand(1 << 18)
phase = []
for _ in range(3000):
    a = one.clone()
    t0 = time.monotonic_ns()
    y = w.call("bench_targets:empty_like", a)
    phase.append(w.lane_timing()["host_sent_ns"] - t0)
    del y, a
print(f"encode phase (call to send)  p50 {statistics.median(phase[500:]) / 1000:.1f} us")
for k, v in T.items():
    print(f"{k:28s} p50 {statistics.median(v[500:]) / 1000:.1f} us")
w.close()

"""A node that makes its output with numpy (``bench_targets.numpy_half``: ``x * 0.5`` in numpy,
wrapped with ``torch.from_numpy``), births on and off (ADR 0045): the median time of a call
that sends a fresh IMAGE-sized tensor and gets the numpy-made output back, at 1, 12 and 64 MiB;
and of one that makes eight temporaries of that size first (``numpy_chain``: ``chain``).
With births off (``AIRLOCK_BORN_MIB=0``) the output is copied into the pool, as every numpy
output was before ADR 0045. Each setting runs in its own process, alternating, ``--runs``
times; one line per run, the machine's load before and after. A quick A/B, not a comparison
with peers (that is bench/compare.py).

    .envs/bench/bin/python bench/numpy_node.py [--runs 2]
"""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
SIZES = ((1 << 20, 1000), (12 << 20, 200), (64 << 20, 40))


def one_run(label: str) -> str:
    import torch
    from alternate import fresh_calls

    import comfy_airlock

    with comfy_airlock.Worker(sys.executable, sys_path=[str(BENCH)], name="numpy-node") as w:
        w.call("bench_targets:numpy_half", torch.ones(4))
        out = []
        for n, reps in SIZES:
            src = torch.rand(n // 4)
            us, y = fresh_calls(w, "bench_targets:numpy_half", src, reps)
            assert torch.equal(y, src * 0.5)
            chain_us, y = fresh_calls(w, "bench_targets:numpy_chain", src, max(reps // 4, 10))
            del y
            out.append(f"{n >> 20} MiB {us:.0f} us, chain {chain_us:.0f} us")
    return f"{label}: " + "; ".join(out)


if __name__ == "__main__":
    import alternate

    from comfy_airlock.settings import ENV

    on, off = ({ENV["born_budget"]: "1024"}, {ENV["born_budget"]: "0"})
    alternate.main(__doc__, one_run, [("births on", on), ("births off", off)], 2)

"""What sending a fresh tensor costs, with kept copies on and off (ADR 0034): the median time
of a call that sends a fresh tensor and gets an int back (``nbytes_of``), and of one that gets
a fresh output back (``times_one``), at 1 MiB (1,000 calls) and 64 MiB (40 calls). Each setting
runs in its own process (the ``keep_sent`` setting is read once), alternating, ``--runs``
times; one line per run. A quick check while changing the send path, not a comparison with
peers (that is bench/compare.py).

    .venv/bin/python bench/send_cost.py [--runs 3]
"""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
SIZES = ((1 << 20, 1000), (64 << 20, 40))


def one_run(label: str) -> str:
    import torch
    from alternate import fresh_calls

    import comfy_airlock

    with comfy_airlock.Worker(sys.executable, sys_path=[str(BENCH)], name="send-cost") as w:
        w.call("bench_targets:times_one", torch.ones(4))
        out = []
        for n, reps in SIZES:
            src = torch.rand(n // 4)
            for fn in ("nbytes_of", "times_one"):
                us, _ = fresh_calls(w, f"bench_targets:{fn}", src, reps)
                out.append(f"{n >> 20} MiB {fn} {us:.0f} us")
    return f"{label}: " + "; ".join(out)


if __name__ == "__main__":
    import alternate

    from comfy_airlock.settings import ENV

    on, off = ({ENV["keep_sent"]: "1024"}, {ENV["keep_sent"]: "0"})
    alternate.main(__doc__, one_run, [("keep on", on), ("keep off", off)], 3)

"""The frame of a quick A/B script (bench/send_cost.py, bench/numpy_node.py): each setting (one
read once per process, such as ``keep_sent`` or ``born_budget``) in a child process of its own,
alternating, ``--runs`` times, with the machine's load before and after; and the timed loop of
fresh inputs they share."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable


def alternate(script: str, settings: list[tuple[str, dict[str, str]]], runs: int) -> None:
    """Runs ``script --child LABEL`` with each ``(label, environment)`` in turn, ``runs``
    times; each child prints its own line."""
    print(f"load average at start: {os.getloadavg()}", flush=True)
    for _ in range(runs):
        for label, env in settings:
            cmd = [sys.executable, script, "--child", label]
            subprocess.run(cmd, env={**os.environ, **env}, check=True)
    print(f"load average at end: {os.getloadavg()}", flush=True)


def fresh_calls(w, target: str, src, reps: int) -> tuple[float, object]:
    """``reps`` calls of ``target`` on a fresh clone of ``src`` each, as a node gets a new
    IMAGE each time: the median µs of a call, and the last output."""
    import statistics
    import time

    ts, y = [], None
    for _ in range(reps):
        x = src.clone()
        y = None  # the previous output goes before the call, as a node's output would
        t0 = time.perf_counter_ns()
        y = w.call(target, x)
        ts.append(time.perf_counter_ns() - t0)
        del x
    return statistics.median(ts) / 1e3, y


def main(doc: str, one_run: Callable[[str], str], settings, runs: int) -> None:
    """The script's entry point: ``--child LABEL`` prints ``one_run(LABEL)``; without it the
    settings (``(label, environment)`` pairs) alternate ``--runs`` times (default ``runs``)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--runs", type=int, default=runs)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(one_run(args.child), flush=True)
        return
    alternate(sys.argv[0], settings, args.runs)

"""Takes the fresh-output row apart (issue 20, item 1): a 1 MiB tensor, fresh on every call,
sent to a warm worker, which returns ``x * 1``; then the same call without each of its parts,
and the in-process floors the row is judged against, all in one process and one run.

    .envs/bench/bin/python bench/fresh_parts.py [--size-mib 1] [--calls 2000] [--rounds 3]

Prints one JSON line per round (medians in µs) and the differences that price each part:

- ``noop``: a call with no tensor;
- ``input``: the fresh input, nothing back (``nbytes_of``); ``input_same``: the same tensor
  every call (kept in shared memory from its second send, ADR 0034);
- ``output``: the fresh input and a fresh output not computed (``empty_like``);
- ``compute``: the fresh input, ``x * 1`` computed and dropped in the worker;
- ``fresh``: the row itself (``times_one``);
- floors: ``x1`` (``x * 1`` here), ``copy`` (one memcpy of the size into a pre-faulted buffer);
- ``x1_in_worker``: ``x * 1`` timed inside the worker, during the row's calls.

and, for each call, where its time went, from the stamps both sides put in the page they share
(``Worker.lane_timing()``, ADR 0046; ``CLOCK_MONOTONIC``, the clock ``time.monotonic_ns``
reads): ``encode`` (the call made to the host's send: the tensor encoded and copied),
``to_worker`` (its send to the worker's receipt), ``worker`` (the worker's receipt to its
send: decoding, the function, encoding), ``to_host``, ``decode`` (the host's receipt to the
call's return). Medians in µs, under ``phases``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent


PHASES = ("encode", "to_worker", "worker", "to_host", "decode")


def _split(lane: dict, t0: int, t1: int) -> dict[str, int]:
    """One call's time by phase, in ns, from its lane's stamps (the last send and receipt of
    each side were this call's: nothing else crosses the lane between calls here)."""
    return {
        "encode": lane["host_sent_ns"] - t0,
        "to_worker": lane["worker_got_ns"] - lane["host_sent_ns"],
        "worker": lane["worker_sent_ns"] - lane["worker_got_ns"],
        "to_host": lane["host_got_ns"] - lane["worker_sent_ns"],
        "decode": t1 - lane["host_got_ns"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=float, default=1.0)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import torch

    import comfy_airlock

    n = int(args.size_mib * (1 << 20)) // 4
    src = torch.rand(n)
    dst = torch.empty(n)
    w = comfy_airlock.Worker(sys.executable, sys_path=[str(BENCH)], name="fresh-parts")
    w.call("bench_targets:import_torch")
    clock = time.perf_counter_ns

    phases: dict[str, dict[str, float]] = {}

    def calls(fn: str, fresh: bool | None) -> float:
        ns, split = [], []
        for _ in range(args.calls):
            x = src.clone() if fresh else src
            t0 = time.monotonic_ns()
            y = w.call(f"bench_targets:{fn}", x) if fresh is not None else w.call(fn)
            t1 = time.monotonic_ns()
            ns.append(t1 - t0)
            split.append(_split(w.lane_timing(), t0, t1))
            del x, y
        name = "noop" if fresh is None else fn if fresh else f"{fn} (same tensor)"
        phases[name] = {k: round(statistics.median(p[k] for p in split) / 1e3, 1) for k in PHASES}
        return statistics.median(ns) / 1e3

    def in_worker() -> float:
        ns = []
        for _ in range(args.calls):
            x = src.clone()
            y, took = w.call("bench_targets:times_one_timed", x)
            ns.append(took)
            del x, y
        return statistics.median(ns) / 1e3

    def here(f) -> float:
        ns = []
        for _ in range(args.calls):
            x = src.clone()
            t0 = clock()
            y = f(x)
            ns.append(clock() - t0)
            del x, y
        return statistics.median(ns) / 1e3

    for r in range(args.rounds):
        m = {
            "noop": calls("bench_targets:noop", None),
            "input": calls("nbytes_of", True),
            "input_same": calls("nbytes_of", False),
            "output": calls("empty_like", True),
            "compute": calls("times_one_kept", True),
            "fresh": calls("times_one", True),
            "x1_in_worker": in_worker(),
            "x1": here(lambda x: x * 1),
            "copy": here(lambda x: dst.copy_(x)),
        }
        m = {k: round(v, 1) for k, v in m.items()}
        floor = m["x1"] + m["copy"]
        parts = {
            "input_over_noop": round(m["input"] - m["noop"], 1),
            "output_over_input": round(m["output"] - m["input"], 1),
            "compute_over_input": round(m["compute"] - m["input"], 1),
            "fresh_to_floor": round(m["fresh"] / floor, 2),
            "fresh_to_two_copy_floor": round(m["fresh"] / (floor + m["copy"]), 2),
            "two_copy_floor_to_floor": round((floor + m["copy"]) / floor, 2),
        }
        print(json.dumps({"round": r, "us": m, "parts": parts, "phases": phases}), flush=True)
    w.close()


if __name__ == "__main__":
    main()

"""Where a worker's cold start goes: one timeline per start, against a bare interpreter that
imports the same modules, in the same run (rounds alternate the two).

    .venv/bin/python bench/cold_start.py [--rounds 5] [--comfy DIR] [--out bench/out/cold_start.json]

A start is ``comfy_airlock.Worker(...)`` up to the return of a first call that imports torch
and ComfyUI's core (``bench_targets.import_comfy``: ``comfy.model_management``,
``comfy.utils``, ``folder_paths``, as ``main.py --cpu``). Every step is a CLOCK_BOOTTIME
timestamp, read by the host or by the worker (``runtime.START_MARKS``), so the steps of both
processes line up:

    spawn        the host starts Worker(): directory, socket, posix_spawn
    interpreter  the worker's Python reached our code (interpreter start-up, site)
    imported     our runtime is imported (the native module, the codec)
    connected    the handshake is done (versions read, both lanes up)
    ready        Worker() returned in the host
    call         the first call reached the worker
    imports      the worker imported torch and ComfyUI's core
    returned     the call returned in the host

The bare row is ``python -c`` doing the same imports, from its start to their end. CPU time is
reported too (user + system of the worker, of the bare interpreter): it moves far less with the
machine's load than the wall clock.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
COMFY = ROOT / ".cache" / "comfyui" / "0.30.0" / "ComfyUI"


def boot() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


BARE = """
import time
t0 = time.clock_gettime(time.CLOCK_BOOTTIME)
import resource, sys
sys.path.insert(0, {bench!r})
import bench_targets
bench_targets.import_comfy({comfy!r})
t1 = time.clock_gettime(time.CLOCK_BOOTTIME)
u = resource.getrusage(resource.RUSAGE_SELF)
print(t0, t1, u.ru_utime + u.ru_stime)
"""


def bare(comfy: str) -> dict[str, float]:
    t = boot()
    out = subprocess.run(
        [sys.executable, "-c", BARE.format(bench=str(BENCH), comfy=comfy)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    t0, t1, cpu = (float(x) for x in out[-3:])
    return {"interpreter": t0 - t, "imports": t1 - t0, "total": t1 - t, "cpu": cpu}


def ours(comfy: str) -> dict[str, float]:
    import comfy_airlock

    t = boot()
    w = comfy_airlock.Worker(sys.executable, sys_path=[str(BENCH)], name="cold-start")
    ready = boot()
    try:
        i0, i1 = w.call("bench_targets:import_comfy_timed", comfy)
        returned = boot()
        cpu = cpu_seconds(w.pid)
        m = w.call("bench_targets:start_marks")
    finally:
        w.close()
    return {
        "interpreter": m["interpreter"] - t,
        "imported": m["imported"] - m["interpreter"],
        "connected": m["connected"] - m["imported"],
        "ready": ready - m["connected"],
        "call": i0 - ready,
        "imports": i1 - i0,
        "returned": returned - i1,
        "total": returned - t,
        "cpu": cpu,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--comfy", default=str(COMFY))
    ap.add_argument("--out", type=Path, default=BENCH / "out" / "cold_start.json")
    args = ap.parse_args()
    rows: dict[str, list[dict[str, float]]] = {"bare": [], "airlock": []}
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        order = ["bare", "airlock"] if r % 2 == 0 else ["airlock", "bare"]
        for who in order:
            rows[who].append(bare(args.comfy) if who == "bare" else ours(args.comfy))
        load.append(os.getloadavg()[0])
        print(f"round {r + 1}: load {load[-1]:.2f}", file=sys.stderr)
    med = {who: {k: statistics.median(x[k] for x in xs) for k in xs[0]} for who, xs in rows.items()}
    ratios = [a["total"] / b["total"] for a, b in zip(rows["airlock"], rows["bare"], strict=True)]
    cpu_ratios = [a["cpu"] / b["cpu"] for a, b in zip(rows["airlock"], rows["bare"], strict=True)]
    result = {
        "rounds": rows,
        "median": med,
        "ratio_total_per_round": ratios,
        "ratio_cpu_per_round": cpu_ratios,
        "ratio_total": statistics.median(ratios),
        "ratio_cpu": statistics.median(cpu_ratios),
        "loadavg_1min": load,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print("step (median s)      airlock    bare")
    for k in med["airlock"]:
        b = med["bare"].get(k)
        print(f"{k:18s} {med['airlock'][k]:9.3f} {'' if b is None else f'{b:9.3f}'}")
    print(
        f"total ratio {result['ratio_total']:.2f} (per round "
        f"{', '.join(f'{x:.2f}' for x in ratios)}); CPU ratio {result['ratio_cpu']:.2f}; "
        f"load {', '.join(f'{x:.1f}' for x in load)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

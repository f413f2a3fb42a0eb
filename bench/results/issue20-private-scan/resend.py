"""The same 64 MiB tensor re-sent to a ComfyUI-shaped worker, 3 x 40 calls, with the worker's
private mappings of kept copies armed (ADR 0039) and, in the workers between, not armed (their
``watch_private`` replaced by one that declines, so ``private_pages`` walks every page as
before; ``disarm.py``). ``targets:nbytes_of`` is the lane-spin probe's (returns ``x.nbytes``).
Run from the repository root: .envs/bench/bin/python bench/results/issue20-private-scan/resend.py
"""

import pathlib
import statistics
import sys
import time

import torch

import comfy_airlock

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
COMFY = ROOT / ".cache/comfyui/0.30.0/ComfyUI"

for armed in (True, False, True, False):
    with comfy_airlock.Worker(
        sys.executable,
        sys_path=[str(HERE), str(HERE.parent / "issue20-lane-spin"), str(ROOT / "bench")],
        name="probe",
    ) as w:
        w.call("bench_targets:import_comfy", str(COMFY))
        if not armed:
            w.call("disarm:disarm")
        x = torch.rand(16 << 20)
        for r in range(3):
            ts = []
            for _ in range(40):
                t0 = time.perf_counter_ns()
                w.call("targets:nbytes_of", x)
                ts.append(time.perf_counter_ns() - t0)
            print(
                f"{'armed    ' if armed else 'not armed'} round {r}: re-send 64 MiB median "
                f"{statistics.median(ts) / 1e3:.0f} us, min {min(ts) / 1e3:.0f} us",
                flush=True,
            )

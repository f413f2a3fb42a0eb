import statistics
import sys
import time

import torch

import comfy_airlock

with comfy_airlock.Worker(
    sys.executable,
    sys_path=[__import__("os").path.dirname(__file__), "/work/main/bench"],
    name="probe",
) as w:
    w.call("bench_targets:import_comfy", "/work/main/.cache/comfyui/0.30.0/ComfyUI")
    x = torch.rand(16 << 20)
    for r in range(3):
        ts = []
        for _ in range(40):
            t0 = time.perf_counter_ns()
            w.call("targets:nbytes_of", x)
            ts.append(time.perf_counter_ns() - t0)
        print(
            f"round {r}: re-send 64 MiB median {statistics.median(ts) / 1e3:.0f} us, min {min(ts) / 1e3:.0f} us"
        )

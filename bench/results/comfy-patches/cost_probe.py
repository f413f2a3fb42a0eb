"""What ADR 0053's check costs a worker: the copy before a pack's import and the comparison
after it, with ComfyUI 0.30.0's nodes (and its extra nodes) imported, as in a worker.

    .venv/bin/python bench/results/comfy-patches/cost_probe.py .cache/comfyui/0.30.0/ComfyUI
"""

import asyncio
import sys
import time

comfyui = sys.argv[1]
sys.path.insert(0, comfyui)
sys.argv = ["main.py", "--cpu"]
import comfy.options  # noqa: E402

comfy.options.enable_args_parsing()
import comfy.cli_args  # noqa: E402
import nodes  # noqa: E402

asyncio.run(nodes.init_extra_nodes(init_custom_nodes=False))
from comfy_airlock.worker import comfy_patches  # noqa: E402

rounds = []
for _ in range(7):
    t0 = time.perf_counter()
    held = comfy_patches.snapshot(comfyui)
    t1 = time.perf_counter()
    found = comfy_patches.replaced(held)
    t2 = time.perf_counter()
    rounds.append((round((t1 - t0) * 1e3, 1), round((t2 - t1) * 1e3, 1)))
print(f"{len(sys.modules)} modules imported, {len(held)} of ComfyUI's; replaced: {found}")
print("copy ms, compare ms per round:", rounds)

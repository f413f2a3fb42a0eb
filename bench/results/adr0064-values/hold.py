"""What holding ComfyUI's objects adds to a node call (ADR 0064): a worker echoes a node's
inputs back, outside ``host_values.holding()`` and inside it, on three input shapes; median of
2,000 round trips each, alternating (each first in every other pair). The encoder itself finds the objects (no walk of the
inputs of its own), so inputs without any should cost the same inside and outside.

    PYTHONPATH=python .venv/bin/python bench/results/adr0064-values/hold.py
"""

import os
import statistics
import sys
import time

import torch

import comfy_airlock
from comfy_airlock import host_values

host_values.install_host()


class Control:
    """An object with no codec, as a ControlNet or a HookGroup is."""


def workflow(nodes: int) -> dict:
    """A UI workflow's JSON of ``nodes`` nodes, as EXTRA_PNGINFO carries it."""
    items = []
    for i in range(nodes):
        items.append(
            {
                "id": i,
                "type": f"Node{i}",
                "pos": [10.0 * i, 20.0],
                "inputs": [
                    {"name": f"in{j}", "type": "IMAGE", "link": 3 * i + j} for j in range(3)
                ],
                "outputs": [{"name": "out", "type": "IMAGE", "links": [3 * i]}],
                "properties": {"Node name for S&R": f"Node{i}"},
                "widgets_values": [1, 2.5, "text", True],
            }
        )
    return {"nodes": items, "links": [[k, k, 0, k + 1, 0, "IMAGE"] for k in range(3 * nodes)]}


t = torch.zeros(1, 77, 768)
SHAPES = {
    "two CONDITIONING entries, a widget": {
        "conditioning": [[t, {"pooled_output": t[:, 0]}], [t, {"pooled_output": t[:, 0]}]],
        "strength": 1.0,
    },
    "a 60-node workflow as EXTRA_PNGINFO": {"extra_pnginfo": {"workflow": workflow(60)}},
    "two CONDITIONING entries holding two objects": {
        "conditioning": [
            [t, {"pooled_output": t[:, 0], "control": Control()}],
            [t, {"pooled_output": t[:, 0], "hooks": Control()}],
        ],
        "strength": 1.0,
    },
}

w = comfy_airlock.Worker(sys.executable, name="hold-bench")
w.call("comfy_airlock.host_values:install_worker")
try:
    for name, kwargs in SHAPES.items():
        plain = name.startswith("two CONDITIONING entries holding") is False
        times = {"outside": [], "holding": []}
        for i in range(2000):
            order = ("outside", "holding") if i % 2 else ("holding", "outside")
            for how in order if plain else ("holding",):
                t0 = time.perf_counter()
                if how == "holding":
                    with host_values.holding():
                        back = w.call("builtins:dict", kwargs)
                else:
                    back = w.call("builtins:dict", kwargs)
                times[how].append(time.perf_counter() - t0)
        if not plain:
            assert back["conditioning"][0][1]["control"] is kwargs["conditioning"][0][1]["control"]
        shown = ", ".join(
            f"{how} {statistics.median(v) * 1e6:.1f} us" for how, v in times.items() if v
        )
        print(f"echo of {name}: {shown}")
finally:
    w.close()
print("1-minute load", round(os.getloadavg()[0], 2))

"""The first version of ADR 0064 walked a node's inputs in Python before each call
(`host_values.hold` at commit d7380c4); it was replaced before landing by the encoder's own
walk. This times that walk alone on the shapes that decided it, loading the old module from
git history (best of 5 repeats).

    PYTHONPATH=python .venv/bin/python bench/results/adr0064-values/walk.py
"""

import os
import subprocess
import sys
import timeit
import types

import torch

REV = "d7380c4"
source = subprocess.run(
    ["git", "show", f"{REV}:python/comfy_airlock/host_values.py"],
    capture_output=True,
    text=True,
    check=True,
).stdout
old = types.ModuleType("host_values_d7380c4")
sys.modules[old.__name__] = old
exec(compile(source, f"{REV}:host_values.py", "exec"), old.__dict__)


def workflow(nodes: int) -> dict:
    items = []
    for i in range(nodes):
        items.append(
            {
                "id": i,
                "type": f"Node{i}",
                "pos": [10.0 * i, 20.0],
                "size": [300, 120],
                "flags": {},
                "order": i,
                "mode": 0,
                "inputs": [
                    {"name": f"in{j}", "type": "IMAGE", "link": 3 * i + j} for j in range(3)
                ],
                "outputs": [
                    {"name": f"out{j}", "type": "IMAGE", "links": [3 * i + j], "slot_index": j}
                    for j in range(2)
                ],
                "properties": {"Node name for S&R": f"Node{i}", "cnr_id": "comfy-core"},
                "widgets_values": [1, 2.5, "text", True, "x"],
            }
        )
    links = [[k, k, 0, k + 1, 0, "IMAGE"] for k in range(200)]
    return {"last_node_id": nodes, "nodes": items, "links": links, "version": 0.4}


t = torch.zeros(1, 77, 768)
prompt = {
    str(i): {"class_type": f"Node{i}", "inputs": {"a": [str(i - 1), 0], "b": 1.5}}
    for i in range(60)
}
SHAPES = {
    "an IMAGE and two widgets": {"image": torch.zeros(1, 64, 64, 3), "amount": 0.5, "mode": "x"},
    "two CONDITIONING entries, an IMAGE, a widget": {
        "conditioning": [[t, {"pooled_output": t[:, 0]}], [t, {"pooled_output": t[:, 0]}]],
        "strength": 1.0,
        "image": torch.zeros(1, 64, 64, 3),
    },
    "a 60-node workflow as EXTRA_PNGINFO and its prompt as PROMPT": {
        "prompt": prompt,
        "extra_pnginfo": {"workflow": workflow(60)},
    },
}
for name, kwargs in SHAPES.items():

    def once(kwargs=kwargs):
        _, held = old.hold(kwargs)
        old.let_go(held)

    n = 200 if "workflow" in name else 20000
    best = min(timeit.repeat(once, number=n, repeat=5)) / n * 1e6
    print(f"the walk of {REV} (hold + let_go), {name}: {best:.1f} us")
print("1-minute load", round(os.getloadavg()[0], 2))

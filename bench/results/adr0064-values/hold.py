"""What holding ComfyUI's objects for a call adds to a forwarded node method (ADR 0064):
``host_values.hold`` and ``let_go`` on three input shapes, best of 5 repeats.

    PYTHONPATH=python .venv/bin/python bench/results/adr0064-values/hold.py
"""

import os
import timeit

import torch

from comfy_airlock import host_values


class Control:
    """An object with no codec, as a ControlNet or a HookGroup is."""


t = torch.zeros(1, 77, 768)
SHAPES = {
    "an IMAGE and two widgets": {"image": torch.zeros(1, 64, 64, 3), "amount": 0.5, "mode": "x"},
    "two CONDITIONING entries, an IMAGE, a widget": {
        "conditioning": [[t, {"pooled_output": t[:, 0]}], [t, {"pooled_output": t[:, 0]}]],
        "strength": 1.0,
        "image": torch.zeros(1, 64, 64, 3),
    },
    "two CONDITIONING entries holding two objects": {
        "conditioning": [
            [t, {"pooled_output": t[:, 0], "control": Control()}],
            [t, {"pooled_output": t[:, 0], "hooks": Control()}],
        ],
        "strength": 1.0,
    },
}

for name, kwargs in SHAPES.items():

    def once(kwargs=kwargs):
        _, held = host_values.hold(kwargs)
        host_values.let_go(held)

    n = 20000
    best = min(timeit.repeat(once, number=n, repeat=5)) / n * 1e6
    print(f"hold + let_go, {name}: {best:.2f} us")
print("1-minute load", round(os.getloadavg()[0], 2))

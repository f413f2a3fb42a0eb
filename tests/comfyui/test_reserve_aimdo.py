"""aimdo's headroom gets the reserve's change of variables only where aimdo reads the same blind
view as upstream (``--disable-nvml-pressure``), against the REAL ``comfy.cli_args`` and
``comfy.memory_management`` of ComfyUI 0.30.0. aimdo's native library needs a GPU, so its one
setter is recorded (the GPU edge); everything else is upstream's own module state, in a fresh
process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import comfy.cli_args
    comfy.cli_args.args.cpu = True
    comfy.cli_args.args.disable_nvml_pressure = sys.argv[2] == "cuda"
    comfy.cli_args.args.reserve_vram = None if sys.argv[3] == "none" else float(sys.argv[3])
    import comfy.memory_management
    import comfy_aimdo.control

    class Lib:  # the GPU edge: aimdo's native library
        calls = []

        def set_simple_vram_headroom(self, n):
            self.calls.append(n)

    comfy_aimdo.control.lib = Lib()
    comfy.memory_management.aimdo_enabled = True  # as main.py sets it once aimdo runs
    from comfy_airlock.host.memory.reserve import publish_aimdo

    out = [publish_aimdo(400 << 20, t) for t in (12 << 30, -(533 << 20))]
    print(json.dumps({"returned": out, "calls": Lib.calls}))
    """
)


def run(comfyui_dir, pressure: str, reserve_vram: str) -> dict:
    p = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(comfyui_dir), pressure, reserve_vram],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ},
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_aimdo_on_cuda_pressure_gets_the_same_change_of_variables(comfyui_dir):
    r = run(comfyui_dir, "cuda", "none")
    # The term is not clamped (a view above the truth lowers the headroom); the headroom is.
    assert r["calls"] == [(400 << 20) + (12 << 30), 0] == r["returned"]
    r = run(comfyui_dir, "cuda", "1.5")  # --reserve-vram is aimdo's base too
    assert r["calls"][0] == int(1.5 * (1 << 30)) + (12 << 30)


def test_aimdo_on_nvml_pressure_is_left_alone(comfyui_dir):
    # It already sees every process: adding the term would count the workers twice.
    r = run(comfyui_dir, "nvml", "none")
    assert r["calls"] == [] and r["returned"] == [None, None]

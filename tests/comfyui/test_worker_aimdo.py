"""DynamicVRAM in a worker (``worker/aimdo.py``), started as ComfyUI's ``main.py`` starts it,
against the REAL ``comfy.cli_args``, ``comfy.model_management``, ``comfy.model_patcher`` and
``comfy.memory_management`` of ComfyUI 0.30.0 and comfy-aimdo's own Python layer
(``comfy_aimdo.control``). The GPU edge is simulated: torch's CUDA queries are answered from a
simulated card (vram_host.py), so upstream believes it runs on an NVIDIA GPU, and aimdo's
native library is a recorder. Each case in a fresh process (upstream's state is module state)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, sys.argv[1])
    sys.path.insert(0, sys.argv[2])
    flags = json.loads(sys.argv[3])
    import torch
    from vram_host import fake_cuda
    fake_cuda(torch, [])
    import comfy.cli_args
    for k, v in flags.items():
        setattr(comfy.cli_args.args, k, v)
    import comfy_aimdo.control

    class Lib:  # the GPU edge: aimdo's native library, recording what it is told
        calls = []

        def __getattr__(self, name):
            def call(*a):
                Lib.calls.append([name, *[list(x) if hasattr(x, "_length_") else x for x in a]])
                return True if name in ("plat_init", "init") else 1
            return call

    comfy_aimdo.control.lib = Lib()
    import comfy.model_management, comfy.model_patcher, comfy.memory_management
    from comfy_airlock.worker import aimdo
    started = aimdo.start(sys.argv[4] == "host-runs-it", "DEBUG")
    print("RESULT " + json.dumps({
        "started": started,
        "calls": Lib.calls,
        "enabled": comfy.memory_management.aimdo_enabled,
        "dynamic": comfy.model_patcher.CoreModelPatcher is comfy.model_patcher.ModelPatcherDynamic,
    }))
    """
)


def _run(comfyui_dir: Path, flags: dict, host: str) -> dict:
    p = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(comfyui_dir), str(HERE), json.dumps(flags), host],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        pytest.fail(f"failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-6000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def test_started_as_main_py_does_when_the_host_runs_it(comfyui_dir):
    flags = {"reserve_vram": 1.5, "vram_headroom": 0.5, "disable_nvml_pressure": True}
    r = _run(comfyui_dir, flags, "host-runs-it")
    assert r["started"] and r["enabled"] and r["dynamic"], r
    calls = [c[0] for c in r["calls"]]
    # init (the reserve, NVML pressure off as flagged), then the device with its headroom,
    # then the host's log level.
    assert ["set_simple_vram_headroom", int(1.5 * 1024**3)] in r["calls"], r["calls"]
    assert ["set_nvml_pressure", False] in r["calls"], r["calls"]
    init = next(c for c in r["calls"] if c[0] == "init")
    assert init[1] == [0] and init[2] == [int(0.5 * 1024**3)] and init[3] == 1, init
    assert calls.index("set_nvml_pressure") < calls.index("plat_init") < calls.index("init")
    assert calls[-1] == "set_log_level_debug", calls


def test_not_started_when_the_host_does_not_run_it(comfyui_dir):
    r = _run(comfyui_dir, {}, "host-does-not")
    assert not r["started"] and not r["enabled"] and not r["dynamic"] and r["calls"] == [], r


def test_not_started_where_main_py_would_not(comfyui_dir):
    # --disable-dynamic-vram in the host's flags (mirrored): main.py skips aimdo, so does the
    # worker, even if told the host runs it.
    r = _run(comfyui_dir, {"disable_dynamic_vram": True}, "host-runs-it")
    assert not r["started"] and not r["enabled"] and r["calls"] == [], r

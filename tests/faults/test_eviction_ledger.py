"""Kills during upstream ComfyUI's own evictions leave the ledger equal to the truth (see
eviction_ledger.py, which runs in a fresh process with the real comfy.model_management)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import missing

from .chaos import SEED, FaultRun, iterations

HERE = Path(__file__).resolve().parent


def test_kill_during_comfyui_evictions_keeps_the_ledger_true(fault):
    comfyui = Path(
        os.environ.get("COMFYUI_DIR") or HERE.parents[1] / ".cache/comfyui/0.30.0/ComfyUI"
    )
    if not (comfyui / "comfy" / "model_management.py").is_file():
        missing(f"ComfyUI tree {comfyui} is missing: scripts/comfyui.sh makes it")
    run: FaultRun = fault("kill -9 during ComfyUI's evictions (ledger = truth)")
    n = iterations(20)
    p = subprocess.run(
        [sys.executable, str(HERE / "eviction_ledger.py"), str(run.rng.randrange(1 << 30)), str(n)],
        capture_output=True,
        text=True,
        env={**os.environ, "COMFYUI_DIR": str(comfyui)},
        timeout=300,
    )
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, (
        f"the scenario failed ({p.returncode}, AIRLOCK_FAULT_SEED={SEED}):\n"
        f"{p.stdout[-3000:]}\n{p.stderr[-5000:]}"
    )
    r = json.loads(lines[-1][len("RESULT ") :])
    run.iterations = r["iterations"]
    run.failures = r["failures"]
    run.leaks = r["leaks"]
    run.outcomes.update(r["outcomes"])
    run.finish()

"""Runs one memory scenario script in a fresh process (upstream's ledger is module state) and
returns the JSON object it prints on its ``RESULT`` line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
AIRLOCK_HOME = Path(os.environ.get("AIRLOCK_TEST_HOME") or REPO / ".cache" / "test-airlock-home")


class ScenarioFailed(Exception):
    """The script exited non-zero or printed no result; the message has its output's tails."""


def run_scenario(
    script: str,
    args: list[str],
    comfyui_dir: Path,
    env: dict[str, str] | None = None,
    timeout: float = 900,
) -> dict:
    full = {
        **os.environ,
        "COMFYUI_DIR": str(comfyui_dir),
        "AIRLOCK_HOME": str(AIRLOCK_HOME),
        # A crash prints every Python thread's stack into the failure's stderr tail.
        "PYTHONFAULTHANDLER": "1",
        **(env or {}),
    }
    p = subprocess.run(
        [sys.executable, str(HERE / script), *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=timeout,
    )
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        raise ScenarioFailed(
            f"{script} {' '.join(args)} failed ({p.returncode}):\n"
            f"{p.stdout[-3000:]}\n{p.stderr[-12000:]}"
        )
    return json.loads(lines[-1][len("RESULT ") :])

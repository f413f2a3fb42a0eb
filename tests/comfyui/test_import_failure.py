"""A pack whose import raises, against the real ComfyUI: the log, ``/airlock/workers`` and
``airlock doctor`` all show the worker's whole traceback (type, message, the pack's file and
line); ``doctor`` exits 1 with a hint that fits an import error; and the failure is cached by
the pack's content, so the next start does not import the pack again, while an edit to the pack
does.

The fixture pack (tests/packs/import-error) appends a line to ``$AIRLOCK_TEST_IMPORT_LOG``
each time it is imported, which is how the test counts imports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .harness import make_base_dir

REPO = Path(__file__).resolve().parents[2]
TEST_PACKS = REPO / "tests" / "packs"
AIRLOCK_HOME = Path(os.environ.get("AIRLOCK_TEST_HOME") or REPO / ".cache" / "test-airlock-home")
PACK = "import-error"


def _doctor(comfyui_dir: Path, base: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRLOCK_", "COMFYUI_"))}
    env["AIRLOCK_HOME"] = str(AIRLOCK_HOME)
    cmd = [sys.executable, "-m", "comfy_airlock.cli", "doctor", "--comfyui", str(comfyui_dir)]
    return subprocess.run(
        [*cmd, "--base", str(base), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _imports(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_import_failure_is_shown_everywhere_and_cached(start_comfyui, comfyui_dir, tmp_path):
    base = make_base_dir(
        tmp_path,
        custom_nodes={"comfy-airlock": REPO / "custom_node"},
        isolated={PACK: TEST_PACKS / PACK},
        copy=True,  # the test edits the pack
    )
    imports = tmp_path / "imports.log"
    env = {"AIRLOCK_HOME": str(AIRLOCK_HOME), "AIRLOCK_TEST_IMPORT_LOG": str(imports)}
    # A scan cached by an earlier run of this test would hide the first import: make the
    # content new.
    salt = base / "isolated_nodes" / PACK / "salt.py"
    salt.write_text(f"# {os.urandom(8).hex()}\n")

    ui = start_comfyui(base, env=env, startup_timeout=1200)
    assert _imports(imports) == 1
    assert "AirlockNeverRegistered" not in ui.object_info()
    log = ui.log_text()
    assert "ModuleNotFoundError: No module named 'airlock_no_such_dependency'" in log
    assert 'nodes.py", line 3' in log, ui.log_tail()
    # What to do about it (ADR 0049): the host's environment lacks the module too.
    assert "imports airlock_no_such_dependency without declaring it, and ComfyUI's" in log
    row = {r["pack"]: r for r in ui.get("/airlock/workers")}[PACK]
    assert row["state"] == "failed" and row["cause"] == "import", row
    assert 'nodes.py", line 3' in row["traceback"], row
    assert "ModuleNotFoundError" in row["error"] and 'nodes.py", line 3' in row["error"]

    # doctor agrees, from what that start cached, and exits 1 with an import hint.
    r = _doctor(comfyui_dir, base)
    assert r.returncode == 1, r.stdout + r.stderr
    report = {p["name"]: p for p in json.loads(r.stdout)["packs"]}[PACK]
    assert not report["ready"] and report["nodes"] == "failed"
    assert report["import_error"]["type"] == "ModuleNotFoundError"
    assert 'nodes.py", line 3' in report["import_error"]["traceback"]
    assert "import error" in report["fix"] and "airlock build" not in report["fix"]
    text = _doctor_text(comfyui_dir, base)
    assert f"{PACK} [NOT READY]" in text and 'nodes.py", line 3' in text, text

    # A second start: the cached failure, said so in the log, and the pack not imported again.
    ui.stop()
    ui.start()
    assert _imports(imports) == 1, "a failed pack with unchanged content was imported again"
    assert "cached failure" in ui.log_text()
    row = {r["pack"]: r for r in ui.get("/airlock/workers")}[PACK]
    assert row["cause"] == "import" and 'nodes.py", line 3' in row["traceback"]

    # An edit to the pack invalidates it: the next start imports it again.
    ui.stop()
    salt.write_text(f"# {os.urandom(8).hex()}\n")
    ui.start()
    assert _imports(imports) == 2


def _doctor_text(comfyui_dir: Path, base: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRLOCK_", "COMFYUI_"))}
    env["AIRLOCK_HOME"] = str(AIRLOCK_HOME)
    cmd = [sys.executable, "-m", "comfy_airlock.cli", "doctor", "--comfyui", str(comfyui_dir)]
    r = subprocess.run(
        [*cmd, "--base", str(base)], env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 1, r.stdout + r.stderr
    return r.stdout

"""A real pack whose import goes on without modules it installs natively (ADR 0057).

AlekPet's ComfyUI_Custom_Nodes_AlekPet pip-installs its translators' packages
(``deep-translator``, ``googletrans-py``) into ComfyUI's environment at its first native start
and imports those nodes under ``except Exception``. A user who ran it natively has them in
ComfyUI's environment; ``airlock isolate`` run by that Python builds the pack an environment
from what it declares (nothing), and its import succeeds without the translator nodes.

This plays that user, in three steps, each printed with its figures:

1. ComfyUI's environment with the two packages (a copy of the host venv,
   ``bench/corpus/envs.host_with``), the pack in a fresh base's ``custom_nodes/``, natively:
   its nodes in ``/object_info``;
2. ``airlock isolate`` on it: its output (the note naming what the import went without);
3. the pins the note names added to its ``airlock.toml``, ComfyUI started again: the pack's
   nodes isolated.

Run: ``.venv/bin/python bench/corpus/went_without_check.py PACK_DIR OUT_DIR``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.corpus import envs  # noqa: E402
from tests.comfyui.harness import DEFAULT_COMFYUI_DIR, ComfyUI, make_base_dir  # noqa: E402

UV = str(REPO / ".venv" / "bin" / "uv")
HOST = str(REPO / ".venv" / "bin" / "python")
EXTRA = ["deep-translator", "googletrans-py"]


def pack_nodes(ui: ComfyUI, pack: str) -> list[str]:
    info = ui.object_info()
    return sorted(n for n, m in info.items() if pack in str(m.get("python_module", "")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pack", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--home", default="/work/corpus/airlock-home")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    name = args.pack.name
    comfyui = Path(os.environ.get("COMFYUI_DIR") or DEFAULT_COMFYUI_DIR)
    env = {"AIRLOCK_HOME": args.home, "HF_HUB_OFFLINE": "1", "PYTHONHASHSEED": "0"}
    python = envs.host_with(
        UV, HOST, EXTRA, Path(args.home) / "native-venvs", args.out / "host-venv.log"
    )
    print(f"ComfyUI's environment: {python} (also {', '.join(EXTRA)})", flush=True)
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"went-without-{os.getpid()}"
    result: dict = {"pack": name, "host_has": EXTRA}

    native = make_base_dir(work, name="native")
    shutil.copytree(args.pack, native / "custom_nodes" / name)
    with ComfyUI(comfyui, native, python=python, env=env, websocket=False) as ui:
        result["native_nodes"] = pack_nodes(ui, name)
        (args.out / "native.log").write_text(ui.log_text())
    print(f"1. natively: {len(result['native_nodes'])} nodes", flush=True)

    base = make_base_dir(work, custom_nodes={"comfy-airlock": REPO / "custom_node"}, name="iso")
    shutil.copytree(args.pack, base / "custom_nodes" / name)
    t0 = time.monotonic()
    cmd = [python, "-m", "comfy_airlock.cli", "isolate", name]
    proc = subprocess.run(
        [*cmd, "--comfyui", str(comfyui), "--base", str(base)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=3600,
    )
    result["isolate"] = {"rc": proc.returncode, "seconds": round(time.monotonic() - t0, 1)}
    (args.out / "isolate.out").write_text(proc.stdout + proc.stderr)
    print(f"2. airlock isolate: rc {proc.returncode}\n{proc.stdout}", flush=True)
    note = next((ln for ln in proc.stdout.splitlines() if "went on without" in ln), None)
    result["note"] = note
    pins = re.findall(r'"([^"]+==[^"]+)"', note or "")
    result["pins"] = pins
    if not pins:
        print("no note with pins: stopping", flush=True)
    else:
        toml = base / "isolated_nodes" / name / "airlock.toml"
        text = toml.read_text().replace("dependencies = []", f"dependencies = {json.dumps(pins)}")
        toml.write_text(text)
        with ComfyUI(comfyui, base, python=python, env=env, websocket=False) as ui:
            result["isolated_nodes_after"] = pack_nodes(ui, name)
            (args.out / "isolated-after.log").write_text(ui.log_text())
        after = result["isolated_nodes_after"]
        print(f"3. pins {pins} added: {len(after)} nodes isolated", flush=True)
        result["same_nodes"] = after == result["native_nodes"]
    (args.out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if "nodes" not in k}, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

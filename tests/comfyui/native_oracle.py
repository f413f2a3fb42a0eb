"""The oracle for "an isolated pack is the pack it is natively": the same packs loaded by one
real ComfyUI natively (in ``custom_nodes/``, no comfy-airlock) and by another isolated (in
``isolated_nodes/``, with comfy-airlock), compared over HTTP.

    pair = start_pair(lambda b, t: start_comfyui(b, startup_timeout=t), tmp_path, packs)
    assert_same_object_info(pair, "my-pack")       # every node, every key, python_module too
    native, isolated = assert_same_outputs(pair, prompt)   # history outputs, bit for bit

Nodes are matched by ``python_module`` (``custom_nodes.<pack dir name>``), so a node the
isolated side lost, gained or misattributed shows up as a difference.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .harness import ComfyUI, make_base_dir

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Pair:
    native: ComfyUI
    isolated: ComfyUI


def start_pair(
    start: Callable[[Path, float], ComfyUI],
    tmp_path: Path,
    packs: Mapping[str, Path],
    *,
    prepare: Callable[[Path], None] | None = None,
    isolated: Mapping[str, Path] | None = None,
) -> Pair:
    """Two servers with the same ``packs`` (name -> directory), started by
    ``start(base_dir, startup_timeout)`` (e.g. ``lambda b, t: start_comfyui(b, env=env,
    startup_timeout=t)``); ``prepare(base)`` runs on both base directories first (models to
    list, inputs to read). The isolated one may build environments at its start: it gets
    a long timeout. ``isolated`` overrides where the isolated side takes a pack from (the
    copy that ``airlock isolate`` gave its ``airlock.toml``, say)."""
    native_base = make_base_dir(tmp_path, custom_nodes=packs, name="native")
    isolated_base = make_base_dir(
        tmp_path,
        custom_nodes={"comfy-airlock": REPO / "custom_node"},
        isolated={**packs, **(isolated or {})},
        name="isolated",
    )
    for base in (native_base, isolated_base):
        if prepare is not None:
            prepare(base)
    return Pair(start(native_base, 300), start(isolated_base, 1200))


def isolate_by_command(
    comfyui_dir: Path, tmp_path: Path, name: str, src: Path, env: Mapping[str, str]
) -> tuple[Path, str]:
    """``airlock isolate NAME`` as a user runs it, on a copy of the pack ``src`` put in a
    ``custom_nodes/`` of its own: (the isolated copy, with the ``airlock.toml`` the command
    wrote from its requirements, the command's output). Fails the test if it refused."""
    base = make_base_dir(tmp_path, name=f"isolate-{name}")
    shutil.copytree(src, base / "custom_nodes" / name, ignore=shutil.ignore_patterns("__pycache__"))
    cmd = [sys.executable, "-m", "comfy_airlock.cli", "isolate", name]
    cmd += ["--comfyui", str(comfyui_dir), "--base", str(base)]
    done = subprocess.run(
        cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=1800
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"airlock isolate {name} refused:\n{out}"
    return base / "isolated_nodes" / name, out


def module_of(pack: str) -> str:
    return f"custom_nodes.{pack}"


def pack_nodes(info: Mapping[str, Any], pack: str) -> dict[str, Any]:
    """The /object_info entries whose python_module is ``pack``'s."""
    return {k: v for k, v in info.items() if v.get("python_module") == module_of(pack)}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def object_info_diff(native: Mapping[str, Any], isolated: Mapping[str, Any]) -> list[str]:
    """Every difference between two sets of /object_info entries, one line each: a node on
    one side only, or a key whose value (or presence) differs."""
    diffs = []
    for node in sorted(set(native) | set(isolated)):
        if node not in isolated:
            diffs.append(f"{node}: only native")
            continue
        if node not in native:
            diffs.append(f"{node}: only isolated")
            continue
        a, b = native[node], isolated[node]
        for key in sorted(set(a) | set(b)):
            if key not in b:
                diffs.append(f"{node}.{key}: native {_canonical(a[key])}, isolated has no key")
            elif key not in a:
                diffs.append(f"{node}.{key}: isolated {_canonical(b[key])}, native has no key")
            elif _canonical(a[key]) != _canonical(b[key]):
                diffs.append(
                    f"{node}.{key}: native {_canonical(a[key])}, isolated {_canonical(b[key])}"
                )
    return diffs


def assert_same_object_info(pair: Pair, pack: str) -> dict[str, Any]:
    """The pack's nodes are the same, with identical /object_info entries, on both servers;
    returns the native entries."""
    native = pack_nodes(pair.native.object_info(), pack)
    isolated = pack_nodes(pair.isolated.object_info(), pack)
    assert native, f"pack {pack!r} registered no node natively:\n{pair.native.log_tail()}"
    diffs = object_info_diff(native, isolated)
    assert not diffs, "\n".join(diffs) + "\n--- isolated log ---\n" + pair.isolated.log_tail()
    return native


def _outputs(ui: ComfyUI, prompt: dict, timeout: float) -> dict[str, Any]:
    entry = ui.run(prompt, timeout=timeout)
    return entry.get("outputs") or {}


def assert_same_outputs(
    pair: Pair, prompt: dict, *, timeout: float = 600
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Runs ``prompt`` on both servers (each must succeed) and checks that every output
    node's UI output is identical; returns (native, isolated) outputs."""
    native = _outputs(pair.native, prompt, timeout)
    isolated = _outputs(pair.isolated, prompt, timeout)
    assert native, "the prompt has no output natively"
    assert _canonical(native) == _canonical(isolated), (
        f"outputs differ:\nnative   {_canonical(native)}\nisolated {_canonical(isolated)}"
    )
    return native, isolated

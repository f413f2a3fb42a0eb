"""Node metadata, cached by the content of everything that can change it, so that a ComfyUI
start with unchanged packs spawns no worker at all.

The key covers the pack's Python sources and config, the environment (its key is a hash of
its lock), the ComfyUI tree's version and our own protocol: any of those changing makes a new
scan. JSON cannot tell a tuple from a list and ComfyUI can (a combo's options are a list inside
an input's tuple), so tuples are tagged.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from comfy_airlock import PROTOCOL_VERSION
from comfy_airlock.node_surface import SCAN_FORMAT

_SKIP_DIRS = {"__pycache__", "node_modules", ".git", ".venv", "venv"}


def key(pack_dir: str, env_key: str, comfyui_dir: str | None) -> str:
    h = hashlib.sha256()
    h.update(f"protocol={PROTOCOL_VERSION}\0scan={SCAN_FORMAT}\0env={env_key}\0".encode())
    if comfyui_dir:
        version = Path(comfyui_dir, "comfyui_version.py")
        h.update(version.read_bytes() if version.is_file() else comfyui_dir.encode())
    root = Path(pack_dir)
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for f in filenames:
            if f.endswith(".py") or f in ("airlock.toml", "comfy-env.toml"):
                files.append(Path(dirpath, f))
    for path in sorted(files):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:32]


def _tag(value: Any) -> Any:
    if isinstance(value, tuple):
        return {"__tuple__": [_tag(v) for v in value]}
    if isinstance(value, list):
        return [_tag(v) for v in value]
    if isinstance(value, dict):
        return {k: _tag(v) for k, v in value.items()}
    return value


def _untag(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__tuple__"}:
            return tuple(_untag(v) for v in value["__tuple__"])
        return {k: _untag(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_untag(v) for v in value]
    return value


def load(cache_dir: Path, k: str) -> dict[str, Any] | None:
    path = cache_dir / f"{k}.json"
    try:
        return _untag(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def store(cache_dir: Path, k: str, meta: dict[str, Any]) -> None:
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir / f".{k}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(_tag(meta)))
    os.replace(tmp, cache_dir / f"{k}.json")

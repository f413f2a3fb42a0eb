"""Node metadata, cached by the content of everything that can change it, so that a ComfyUI
start with unchanged packs spawns no worker at all; and a pack whose import failed, cached by
the same key, so that it is not imported again at every start (a failed pack cost a worker
spawn and its whole import each time).

The key (``_native.scan_key``, also what ``airlock doctor`` reads) covers the pack's Python
sources and config, the environment (its key is a hash of its lock), the ComfyUI tree's
version, this package's sources and our protocol: any of those changing makes a new scan, so a
cached failure is retried once the pack, its env or comfy-airlock changes (or with
the ``rescan`` setting). Only failures of the pack's own code
are cached (an exception raised in the worker, with its traceback): a worker that died or did
not start in time may do better next time. JSON cannot tell a tuple from a list and ComfyUI
can (a combo's options are a list inside an input's tuple), so tuples are tagged.

An entry is ``{"nodes": {...}}`` or ``{"failed": {"error", "type", "traceback"}}``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import comfy_airlock
from comfy_airlock import _native, settings


def package_dir() -> str:
    """This ``comfy_airlock`` package: its sources are part of the key (the worker runtime that
    imports the pack is in it), so an upgrade retries cached failures."""
    return os.path.dirname(os.path.abspath(comfy_airlock.__file__))


def key(pack_dir: str, env_key: str, comfyui_dir: str | None) -> str:
    return _native.scan_key(pack_dir, env_key, comfyui_dir, package_dir())


def rescan_forced() -> bool:
    """The ``rescan`` setting: cached failures are ignored (e.g. an import that needed the
    network, now back)."""
    return settings.get().rescan


def failure_of(e: BaseException) -> dict[str, Any] | None:
    """The cacheable record of a scan that raised, or None when the pack's code is not what
    failed (the worker died, did not start, or timed out: another start may succeed)."""
    tb = getattr(e, "remote_traceback", None)
    if not tb:
        return None
    raw = str(getattr(e, "remote_type", "") or type(e).__name__)
    kind = raw.removeprefix("builtins.")
    error = str(e).strip()
    if error.startswith(raw):
        # A type the host could not re-create names itself in its message ("builtins.X: 1"):
        # recorded as the type is, so that every reader (the log, `airlock doctor`) says it once.
        error = kind + error[len(raw) :]
    return {"error": error, "type": kind, "traceback": tb}


def describe(failure: dict[str, Any]) -> str:
    """``Type: message`` and the worker's traceback, as the log and ``/airlock/workers``
    show it (``airlock doctor`` prints the same)."""
    kind, error = failure.get("type"), failure.get("error") or ""
    head = error if not kind or error.startswith(kind) else f"{kind}: {error}"
    tb = (failure.get("traceback") or "").rstrip()
    return f"{head}\n{tb}" if tb else head


def choices_note(name: str, added: dict[str, list[str]]) -> str:
    """What a user must know about a pack that added to ComfyUI's own choice lists at import
    (``comfy_choices``: KSampler's samplers and schedulers): isolated, in its worker only."""
    what = " and ".join(f"the {kind} {', '.join(items)}" for kind, items in sorted(added.items()))
    return (
        f"pack {name!r} adds {what} to ComfyUI's own lists when it is imported; isolated, it "
        "does so in its own worker only: its own nodes offer them, ComfyUI's KSampler and "
        "sampling nodes do not, and a workflow that picks one there fails validation. Run it "
        "from custom_nodes/ if your workflows need that."
    )


def patches_note(name: str, patched: list[str]) -> str:
    """What a user must know about a pack that replaced ComfyUI's functions at import (ADR
    0053): it did so in its worker only."""
    return (
        f"pack {name!r} replaces ComfyUI's {', '.join(patched)} when it is imported; isolated, "
        "it does so in its own worker only: ComfyUI's own are unchanged, so what the pack "
        "changes there (sampling, validation, execution) does not happen in ComfyUI. Run it "
        "from custom_nodes/ if it needs that."
    )


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


def path(cache_dir: Path, k: str) -> Path:
    return cache_dir / f"{k}.json"


def load(cache_dir: Path, k: str) -> dict[str, Any] | None:
    try:
        return _untag(json.loads(path(cache_dir, k).read_text()))
    except (OSError, ValueError):
        return None


def store(cache_dir: Path, k: str, meta: dict[str, Any]) -> None:
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir / f".{k}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(_tag(meta)))
    os.replace(tmp, path(cache_dir, k))

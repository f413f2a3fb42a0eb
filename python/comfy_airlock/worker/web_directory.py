"""The pack's web folders, read in its worker for the host, which serves them as ComfyUI serves
a native pack's (host/web_dirs.py, ADR 0021): its ``WEB_DIRECTORY``, and the folders its import
put into ``nodes.EXTENSION_WEB_DIRS`` itself, as ComfyUI-Impact-Pack does to serve its files
under a fixed name whatever its folder is called."""

from __future__ import annotations

import logging
import os
import sys
import types

log = logging.getLogger("comfy_airlock.worker")


def read(pack: types.ModuleType | None, entry: str | None) -> str | None:
    """``WEB_DIRECTORY`` as ``load_custom_node`` reads it, from the module ComfyUI imports (the
    pack's package); with an ``entry`` module (airlock.toml), from that one when the package
    has none. None when the pack has none."""
    if pack is None:
        return None
    modules = [pack]
    if entry and pack.__name__.endswith("." + entry):
        package = sys.modules.get(pack.__name__[: -len(entry) - 1])
        if package is not None:
            modules.insert(0, package)
    for module in modules:
        value = getattr(module, "WEB_DIRECTORY", None)
        if value is None:
            continue
        if isinstance(value, (str, os.PathLike)):
            return os.fspath(value)
        log.warning("WEB_DIRECTORY is a %s, not a path: not served", type(value).__name__)
        return None
    return None


def extension_dirs() -> dict[str, str]:
    """``nodes.EXTENSION_WEB_DIRS`` of this worker now: before the pack's import, and after it
    to see what the import added (:func:`added`)."""
    dirs = getattr(sys.modules.get("nodes"), "EXTENSION_WEB_DIRS", None)
    if not isinstance(dirs, dict):
        return {}
    return {str(k): os.fspath(v) for k, v in dirs.items() if isinstance(v, (str, os.PathLike))}


def added(before: dict[str, str]) -> dict[str, str]:
    """The entries of ``nodes.EXTENSION_WEB_DIRS`` the pack's import added or changed."""
    return {k: v for k, v in extension_dirs().items() if before.get(k) != v}

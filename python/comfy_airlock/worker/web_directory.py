"""The pack's ``WEB_DIRECTORY``, read in its worker for the host, which serves the folder as
ComfyUI serves a native pack's (host/web_dirs.py, ADR 0021)."""

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

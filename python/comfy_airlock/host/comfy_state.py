"""What a worker must know of the host's ComfyUI: where its source tree is, its directories and
its command-line flags, read from the running host; and the one thing written back, the
``folder_paths`` names an isolated pack registers (:func:`add_folders`)."""

from __future__ import annotations

import enum
import os
import sys
from typing import Any

from comfy_airlock.node_surface import FOLDER_ROOTS, folder_from_scan


def comfyui_dir() -> str | None:
    """The host's ComfyUI source tree (the directory of its ``folder_paths``), if running in
    ComfyUI."""
    fp = sys.modules.get("folder_paths")
    path = getattr(fp, "__file__", None)
    return os.path.dirname(os.path.abspath(path)) if path else None


def base_dir() -> str | None:
    """Where the host keeps custom_nodes/, models/, output/… (``--base-directory``)."""
    fp = sys.modules.get("folder_paths")
    return getattr(fp, "base_path", None)


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return None if any(i is _SKIP for i in items) else items
    return _SKIP


_SKIP = object()


def args_snapshot() -> dict[str, Any]:
    """The host's parsed flags that are plain values (the worker picks what it mirrors)."""
    cli = sys.modules.get("comfy.cli_args")
    if cli is None:
        return {}
    out = {}
    for key, value in vars(cli.args).items():
        v = _plain(value)
        if v is not _SKIP:
            out[key] = v
    return out


def folder_paths_snapshot() -> dict[str, Any] | None:
    fp = sys.modules.get("folder_paths")
    if fp is None:
        return None
    names = {
        name: [list(paths), sorted(exts)]
        for name, (paths, exts) in fp.folder_names_and_paths.items()
    }
    return {
        "base_path": fp.base_path,
        "models_dir": fp.models_dir,
        "output_directory": fp.get_output_directory(),
        "temp_directory": fp.get_temp_directory(),
        "input_directory": fp.get_input_directory(),
        "user_directory": fp.get_user_directory(),
        "folder_names_and_paths": names,
    }


def main_identity() -> dict[str, Any]:
    """The host's ``__main__.__file__`` (ComfyUI's ``main.py``) and ``sys.argv``, for a worker
    to present to its pack as they are natively."""
    main = sys.modules.get("__main__")
    return {"main_file": getattr(main, "__file__", None), "argv": list(sys.argv)}


# ComfyUI's flags for a worker whose host is not ComfyUI (``airlock isolate`` reads a pack's
# nodes to list them; that scan is neither cached nor run): ``--cpu``, since without it
# ComfyUI's own ``comfy.model_management`` does not import on a machine without a GPU (ComfyUI
# does not start there without ``--cpu`` either), and every pack importing it would fail.
STANDALONE_FLAGS = ("--cpu",)


def host_identity(comfyui: str | None) -> dict[str, Any]:
    """``args``, ``aimdo``, ``main_file`` and ``argv`` for a worker: the running ComfyUI's, or, when the
    host is not ComfyUI, those of ComfyUI's ``main.py`` started with :data:`STANDALONE_FLAGS`
    (not the ``airlock`` command's own, which the pack would otherwise see as its program)."""
    if "comfy.cli_args" in sys.modules:
        memory = sys.modules.get("comfy.memory_management")
        aimdo = bool(getattr(memory, "aimdo_enabled", False))  # main.py started DynamicVRAM
        return {"args": args_snapshot(), "aimdo": aimdo, **main_identity()}
    main = os.path.join(comfyui, "main.py") if comfyui else None
    args = {flag.lstrip("-").replace("-", "_"): True for flag in STANDALONE_FLAGS}
    return {"args": args, "main_file": main, "argv": [main or "main.py", *STANDALONE_FLAGS]}


def add_folders(folders: dict[str, Any] | None) -> list[str]:
    """Registers in the host's ``folder_paths`` what an isolated pack registered in its worker
    (its prestartup script, its import): natively that code runs in this process, and the
    host's model lists, ``/models`` and other packs read it here. Paths are appended, never
    replaced. Returns the names that changed."""
    fp = sys.modules.get("folder_paths")
    if fp is None or not folders:
        return []
    roots = {name: getattr(fp, name, None) for name in FOLDER_ROOTS}
    changed = []
    for name, (entries, exts) in folders.items():
        # Relative to the host's directories now, not those the (cached) scan ran with.
        paths = [p for p in (folder_from_scan(e, roots) for e in entries) if p is not None]
        entry = fp.folder_names_and_paths.get(name)
        if entry is None:
            fp.folder_names_and_paths[name] = (list(paths), set(exts))
            changed.append(name)
            continue
        old_paths, old_exts = entry
        new_paths = [p for p in paths if p not in old_paths]
        new_exts = set(exts) - set(old_exts)
        for path in new_paths:
            fp.add_model_folder_path(name, path)
        if new_exts:
            # ComfyUI keeps a set; a few entries (and packs) use a list.
            merged = set(old_exts) | new_exts
            fp.folder_names_and_paths[name] = (fp.folder_names_and_paths[name][0], merged)
        if new_paths or new_exts:
            changed.append(name)
    return changed

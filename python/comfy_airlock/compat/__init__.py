"""comfy-env's API for packs written for it, backed by comfy-airlock (ADR 0025).

A comfy-env pack imports ``comfy_env`` (``register_nodes``, ``setup_env``, ``install``,
``copy_files``, ``register_serializer``) and, in its workers, ``comfy_worker``. The modules
that answer live in ``shim/``, a folder that is put on ``sys.path`` *after* site-packages:

- in ComfyUI's Python, by ``comfy_airlock_comfy_env.pth`` (written by ``airlock install``, or
  :func:`install_pth`), and again by :func:`add_to_path` when comfy-airlock's host code loads;
- in a worker, by the worker before it imports the pack.

A real comfy-env installed in site-packages (or anywhere earlier on the path) is therefore
found first and wins: ours answers only where no ``comfy_env`` is installed. Nothing here
imports comfy-env's code or shadows it.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

PTH_NAME = "comfy_airlock_comfy_env.pth"


def shim_dir() -> str:
    """The folder holding our ``comfy_env`` and ``comfy_worker``."""
    return str(Path(__file__).resolve().parent / "shim")


def add_to_path() -> None:
    """Appends the shim folder to ``sys.path`` (last, so an installed comfy-env wins)."""
    d = shim_dir()
    if d not in sys.path:
        sys.path.append(d)


def install_pth(site_dir: str | None = None) -> Path:
    """Writes the ``.pth`` file that appends the shim folder to ``sys.path`` at every start of
    this Python (into its purelib site-packages unless ``site_dir`` is given)."""
    target = Path(site_dir or sysconfig.get_paths()["purelib"]) / PTH_NAME
    text = shim_dir() + "\n"
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(target)
    return target


def real_comfy_env() -> str | None:
    """Where an installed comfy-env is (None when only ours would answer)."""
    import importlib.util

    spec = importlib.util.find_spec("comfy_env")
    origin = getattr(spec, "origin", None) if spec is not None else None
    if origin is None or origin.startswith(shim_dir()):
        return None
    return origin

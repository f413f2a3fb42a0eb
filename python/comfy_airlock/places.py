"""Where ComfyUI is, for the ``airlock`` commands written in Python (``install``, ``isolate``):
the same rule as the Rust ones (``build``, ``doctor``, ``gc``), so every command finds the same
folders from the same arguments.

- ``--comfyui DIR``: ComfyUI's folder (its ``main.py``); default: the current folder when it
  holds ``main.py`` and ``comfy/``, else ``$COMFYUI_DIR``.
- ``--base DIR``: the folder holding ``custom_nodes/`` and ``isolated_nodes/`` (ComfyUI's
  ``--base-directory``); default: the ComfyUI folder.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path


class PlaceError(RuntimeError):
    """ComfyUI could not be found from the arguments, the current folder or the environment."""


NO_BASE = (
    "cannot tell where ComfyUI is: run this in ComfyUI's folder, pass --comfyui DIR "
    "(or --base DIR), or set COMFYUI_DIR"
)


@dataclass(frozen=True)
class Place:
    comfyui: Path | None
    base: Path

    @property
    def custom_nodes(self) -> Path:
        return self.base / "custom_nodes"

    @property
    def isolated_nodes(self) -> Path:
        return self.base / "isolated_nodes"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--comfyui",
        metavar="DIR",
        help="ComfyUI's folder [default: the current folder if it holds main.py and comfy/, "
        "else $COMFYUI_DIR]",
    )
    parser.add_argument(
        "--base",
        metavar="DIR",
        help="the folder holding custom_nodes/ and isolated_nodes/ [default: the ComfyUI folder]",
    )


def _is_comfyui(d: Path) -> bool:
    return (d / "main.py").is_file() and (d / "comfy").is_dir()


def resolve(comfyui: str | None, base: str | None) -> Place:
    """The place the arguments name; raises :class:`PlaceError` when there is none."""
    found: Path | None = None
    if comfyui:
        found = Path(comfyui)
    elif _is_comfyui(Path.cwd()):
        found = Path.cwd()
    elif os.environ.get("COMFYUI_DIR"):
        found = Path(os.environ["COMFYUI_DIR"])
    if found is not None:
        found = found.expanduser().absolute()
        if not found.is_dir():
            raise PlaceError(f"ComfyUI folder {found} does not exist")
    where = Path(base).expanduser().absolute() if base else found
    if where is None:
        raise PlaceError(NO_BASE)
    if not where.is_dir():
        raise PlaceError(f"{where} does not exist")
    return Place(comfyui=found, base=where)

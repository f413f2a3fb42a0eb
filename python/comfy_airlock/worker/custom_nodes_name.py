"""The pack importable as ``custom_nodes.<its folder>``, as natively.

ComfyUI runs with its own folder on ``sys.path``, so natively ``custom_nodes`` is a namespace
package over ``ComfyUI/custom_nodes`` and a pack can import its own files by that absolute path:
ComfyUI-SaveImageWithMetaData loads its capture rules with
``importlib.import_module("custom_nodes.ComfyUI-SaveImageWithMetaData.py.defs.ext.<name>")``
while it is imported; others write ``from custom_nodes.<pack>.wildcard import tools``. An
isolated pack lives in ``isolated_nodes/``, so in its worker that name found nothing (``No
module named 'custom_nodes.ComfyUI-SaveImageWithMetaData'``) for a pack that loads natively.

Before the pack's ``__init__`` runs, its module is also ``custom_nodes.<folder>``: the one module
object (natively the name imports the pack a second time; here the pack's code runs once), and
what the pack imports below it by that path comes from its folder. Nothing else under
``custom_nodes`` changes: another pack's folder there is ComfyUI's process's, not this
worker's (packs that import each other belong in one group, ADR 0054, where each member gets
its name).
"""

from __future__ import annotations

import importlib
import sys
import types

PACKAGE = "custom_nodes"


def register(folder_name: str, module: types.ModuleType) -> None:
    """Makes ``module`` (a pack being imported from its folder ``folder_name``) importable as
    ``custom_nodes.<folder_name>`` too."""
    parent = sys.modules.get(PACKAGE)
    if parent is None:
        try:
            parent = importlib.import_module(PACKAGE)
        except ImportError:
            # No ComfyUI folder on sys.path here: a package holding only the pack's name.
            parent = types.ModuleType(PACKAGE)
            parent.__path__ = []  # type: ignore[attr-defined]
            sys.modules[PACKAGE] = parent
    sys.modules[f"{PACKAGE}.{folder_name}"] = module
    setattr(parent, folder_name, module)


def unregister(folder_name: str) -> None:
    """Undoes :func:`register` for a pack whose import failed."""
    sys.modules.pop(f"{PACKAGE}.{folder_name}", None)
    parent = sys.modules.get(PACKAGE)
    if parent is not None and hasattr(parent, folder_name):
        delattr(parent, folder_name)

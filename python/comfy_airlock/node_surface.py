"""What a ComfyUI node looks like at the process boundary, the same on both sides: the class
attributes the worker's scan reads and the host's proxy carries, and the model objects that must
not cross (the host's proxies check inputs, the worker checks outputs)."""

from __future__ import annotations

import os
import sys
from typing import Any


def python_module(pack_dir: str) -> str:
    """What ComfyUI's ``load_custom_node`` sets as ``RELATIVE_PYTHON_MODULE`` on the nodes of
    the pack in ``pack_dir`` had it sat in ``custom_nodes/`` (``/object_info``'s
    ``python_module``, by which the frontend groups nodes)."""
    return f"custom_nodes.{os.path.basename(os.path.normpath(pack_dir))}"


def node_module(pack_dir: str, meta: dict[str, Any]) -> str:
    """:func:`python_module` of a scanned node: its member's, for a group (ADR 0054)."""
    member = meta.get("member")
    return python_module(os.path.join(pack_dir, member) if member else pack_dir)


# A V3 node's hidden values (PROMPT, UNIQUE_ID, DYNPROMPT...) cross among its inputs under
# this prefix: natively they reach the class clone apart from the inputs, and a node may have
# an input of a hidden value's name (Easy-Use's promptLine: an input "prompt" beside hidden
# PROMPT). Only an input literally named "hidden:prompt" (and the like) would be mistaken.
HIDDEN_PREFIX = "hidden:"


# V1 class attributes a proxy carries as they are (besides INPUT_TYPES and FUNCTION).
NODE_ATTRS = (
    "RETURN_TYPES",
    "RETURN_NAMES",
    "OUTPUT_IS_LIST",
    "INPUT_IS_LIST",
    "OUTPUT_NODE",
    "OUTPUT_TOOLTIPS",
    "CATEGORY",
    "DESCRIPTION",
    "DEPRECATED",
    "EXPERIMENTAL",
    "DEV_ONLY",
    "API_NODE",
    "NOT_IDEMPOTENT",
    "HAS_INTERMEDIATE_OUTPUT",
    "SEARCH_ALIASES",
    "ESSENTIALS_CATEGORY",
)

# (module, class): checked only if the module is already imported, so nothing is imported here.
_MODEL_CLASSES = (
    ("comfy.model_patcher", "ModelPatcher"),
    ("comfy.sd", "CLIP"),
    ("comfy.sd", "VAE"),
    ("comfy.controlnet", "ControlBase"),
    ("torch.nn", "Module"),
)


def model_kind(value: Any) -> str | None:
    """The class name of ``value`` if it is a model object bound to its process, else None."""
    for mod, name in _MODEL_CLASSES:
        m = sys.modules.get(mod)
        cls = getattr(m, name, None) if m is not None else None
        if cls is not None and isinstance(value, cls):
            return type(value).__name__
    return None


# folder_paths attributes a pack's folder registrations are made relative to, most specific
# first: a cached scan's folders then follow the host's directories, not the ones it ran with.
FOLDER_ROOTS = ("models_dir", "base_path")


def folder_to_scan(path: str, roots: dict[str, str]) -> Any:
    """``path`` as a scan carries it: ``{"under": root, "path": relative}`` when it lies in one
    of ``roots`` (name -> directory), else as it is."""
    for name in FOLDER_ROOTS:
        root = roots.get(name)
        if root and os.path.normpath(path).startswith(os.path.normpath(root) + os.sep):
            return {"under": name, "path": os.path.relpath(path, root)}
    return path


def folder_from_scan(entry: Any, roots: dict[str, str]) -> str | None:
    """The inverse of :func:`folder_to_scan` against the host's ``roots``; None if that root
    is unknown here."""
    if isinstance(entry, str):
        return entry
    root = roots.get(entry.get("under", ""))
    return os.path.join(root, entry["path"]) if root else None

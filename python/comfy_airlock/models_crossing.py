"""Model objects that must not cross the process boundary, recognised the same way on both
sides (the host's proxies check inputs, the worker checks outputs)."""

from __future__ import annotations

import sys
from typing import Any

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

"""What of ComfyUI's ``DynamicPrompt`` (a node's ``DYNPROMPT`` hidden input) crosses the
process boundary, the same on both sides (ADR 0022): the prompt as the client sent it and the
nodes ComfyUI added while it ran (node expansion), with their parent and display ids. Plain
values; the host reads them from ComfyUI's object, the worker builds its own from them.
"""

from __future__ import annotations

from typing import Any

# DynamicPrompt's own attributes (comfy_execution/graph.py), which its methods read.
_PARTS = {
    "ephemeral": "ephemeral_prompt",
    "parents": "ephemeral_parents",
    "display": "ephemeral_display",
}


def encode_dynprompt(dynprompt: Any) -> dict[str, Any]:
    state = {"original": dynprompt.get_original_prompt()}
    for key, attr in _PARTS.items():
        state[key] = dict(getattr(dynprompt, attr, None) or {})
    return state


def decode_dynprompt(state: dict[str, Any], cls: type) -> Any:
    """An instance of ``cls`` (upstream's ``DynamicPrompt`` or one with its API) holding
    ``state``."""
    dynprompt = cls(state["original"])
    for key, attr in _PARTS.items():
        setattr(dynprompt, attr, dict(state.get(key) or {}))
    return dynprompt

"""Codecs for ComfyUI's own small value types that nodes return (host and worker)."""

from __future__ import annotations


def register_comfy_codecs() -> None:
    """ComfyUI's own small value types that nodes return, on both sides (a codec must be
    registered where the value is sent and where it is received): ``ExecutionBlocker``, which
    a switch node returns to stop a branch."""
    try:
        from comfy_execution.graph_utils import ExecutionBlocker
    except Exception:
        return
    from comfy_airlock.values import register_codec

    register_codec(
        "comfy.ExecutionBlocker", ExecutionBlocker, lambda b: b.message, ExecutionBlocker
    )

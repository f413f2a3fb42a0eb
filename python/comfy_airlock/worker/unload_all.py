"""A pack's ``unload_all_models()`` empties ComfyUI's memory too, as natively (ADR 0052).

Packs call ``comfy.model_management.unload_all_models()`` to make room: Easy-Use's "Clean GPU
Used", LayerStyle's "Purge VRAM", and the LLM and captioner nodes that purge ComfyUI's models
before loading their own, which are the packs most often isolated for their dependencies.
Natively that empties ComfyUI's ledger: its checkpoint, and every worker's models through their
stand-ins. In a worker the call reaches the worker's own copy of ComfyUI, so it would free only
the worker's models and leave ComfyUI's on the card.

The worker's function is wrapped (our copy of ComfyUI, never the host's): it runs as it is, on
the worker's own models, under the lock the host's model commands take; then, inside a call,
the host is asked ``unload_all?`` and runs ComfyUI's own ``unload_all_models()`` on the
thread of the node's call, as the pack's call would have natively. The question is asked
outside the lock: the host's answer may send this worker eviction commands of its own.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from comfy_airlock.worker import link, owned

log = logging.getLogger("comfy_airlock.worker")


def install(ledger_lock: Any) -> None:
    """Wraps the worker's ``comfy.model_management.unload_all_models`` (once; it is imported)."""
    mm = sys.modules.get("comfy.model_management")
    original = getattr(mm, "unload_all_models", None)
    if original is None or getattr(original, "_airlock", False):
        return

    def unload_all_models(*args: Any, **kwargs: Any) -> Any:
        with ledger_lock, owned.quiet():  # ComfyUI's loader moving its own models
            out = original(*args, **kwargs)
        if link.in_call():
            try:
                link.ask("unload_all?", None)
            except Exception as e:  # the worker's own models are freed all the same
                log.warning("ComfyUI's models not unloaded for the pack: %s", e)
        return out

    unload_all_models._airlock = True  # type: ignore[attr-defined]
    unload_all_models.__wrapped__ = original  # type: ignore[attr-defined]
    mm.unload_all_models = unload_all_models  # type: ignore[union-attr]

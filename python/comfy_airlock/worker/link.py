"""The worker's link to the host, for code that runs during a call: :func:`emit` an event,
:func:`ask` a question, :func:`in_call`.

The runtime sets it once connected (:func:`install`); the modules that talk to the host
(``models``, ``admission``, ``server_shim``) import only this, never the runtime that calls
them, so the worker's modules import downward only.
"""

from __future__ import annotations

from typing import Any

from comfy_airlock import _native

#: The connected ``_native.WorkerLink`` (None before the runtime connects, or outside a worker).
LINK: Any = None


def install(link: Any) -> None:
    global LINK
    LINK = link


def _link() -> Any:
    if LINK is None:
        raise _native.AirlockError("not running inside a comfy-airlock worker")
    return LINK


def emit(topic: str, payload: Any = None) -> None:
    """Sends an event to the host for the call running now (progress, previews, UI
    messages). It does not wait for the host. Raises outside a call."""
    _link().emit(topic, payload)


def ask(topic: str, payload: Any = None) -> Any:
    """Asks the host ``topic`` (ending in ``?``) for the call running now and returns its
    answer: the call waits, and the host answers on the thread that waits for this call,
    inside ComfyUI's node context (admission before a load is one such question)."""
    return _link().ask(topic, payload)


def in_call() -> bool:
    """Whether a call from the host is running now."""
    link = LINK
    return bool(link is not None and getattr(link, "in_call", False))

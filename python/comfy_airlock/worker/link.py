"""The worker's link to the host, for code that runs during a call: :func:`emit` an event,
:func:`ask` a question, :func:`in_call`.

The runtime sets it once connected (:func:`install`); the modules that talk to the host
(``models``, ``admission``, ``server_shim``) import only this, never the runtime that calls
them, so the worker's modules import downward only.

A worker has two call lanes (ADR 0055): the node calls', served by the main thread, and the
HTTP routes', served by a thread of its own (:func:`install_here`). Events and questions go on
the lane of the call running on the thread that sends them: a route handler's ``send_sync``
goes with its request, a node's with the node. A UI message sent while no call runs (a pack's
own thread) goes on the events lane (:func:`send_ui`, ADR 0056).
"""

from __future__ import annotations

import threading
from typing import Any

from comfy_airlock import _native

#: The connected ``_native.WorkerLink`` of the node calls (None before the runtime connects,
#: or outside a worker).
LINK: Any = None

_HERE = threading.local()


def install(link: Any) -> None:
    global LINK
    LINK = link


def install_here(link: Any) -> None:
    """Makes ``link`` (the route lane's) this thread's: the thread that serves it."""
    _HERE.link = link


def serves_calls() -> bool:
    """Whether this thread serves one of the lanes (may read its answers): the main thread,
    or the route lane's."""
    return threading.current_thread() is threading.main_thread() or hasattr(_HERE, "link")


def _link() -> Any:
    link = getattr(_HERE, "link", None) or LINK
    if link is None:
        raise _native.AirlockError("not running inside a comfy-airlock worker")
    return link


def emit(topic: str, payload: Any = None) -> None:
    """Sends an event to the host for the call running now (progress, previews, UI
    messages). It does not wait for the host. Raises outside a call."""
    _link().emit(topic, payload)


def send_ui(topic: str, payload: Any) -> None:
    """A UI message (``send_sync``, ``progress_text``) from any thread: with the call running
    on this thread's lane, if one runs (a node's, a route handler's), else on the events lane,
    which the host reads while no call runs (ADR 0056: a monitor's own thread)."""
    current = _link()
    if current.in_call:
        try:
            current.emit(topic, payload)
            return
        except _native.AirlockError as e:  # the call ended meanwhile
            if "outside a call" not in str(e):
                raise
    _link_of_calls().post(topic, payload)


def _link_of_calls() -> Any:
    if LINK is None:
        raise _native.AirlockError("not running inside a comfy-airlock worker")
    return LINK


def ask(topic: str, payload: Any = None) -> Any:
    """Asks the host ``topic`` (ending in ``?``) for the call running now and returns its
    answer: the call waits, and the host answers on the thread that waits for this call,
    inside ComfyUI's node context (admission before a load is one such question)."""
    return _link().ask(topic, payload)


def in_call() -> bool:
    """Whether a call from the host is running now."""
    link = LINK
    return bool(link is not None and getattr(link, "in_call", False))

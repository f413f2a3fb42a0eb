"""Everything a worker sends the host during a call, routed by one table: the memory topics
(``memory/events.py``: ``admit?``, ``oom?``, ``loaded``, ``telemetry``), the server's questions
(``server?``, ``server_bridge.py``), an interrupt a node raised itself (``interrupt?``), and
what the UI should hear while a node runs (progress, previews, ``send_sync`` messages,
progress text).

Every event runs on the thread that is calling the worker, i.e. inside the node's execution
context, so ComfyUI attributes progress to the right node, and a question's answer is what
that call would have read in-process. A topic ending in ``?`` is a question the worker's call
waits on; the others are events it does not wait for.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from comfy_airlock.host import server_bridge
from comfy_airlock.host.memory import events as memory_events
from comfy_airlock.host.memory.shapes import WorkerHandle

log = logging.getLogger("comfy_airlock")


def route(handle: WorkerHandle, topic: str, payload: Any) -> Any:
    """The answer to ``topic`` from ``handle``'s worker (None for an event)."""
    memory = memory_events.TOPICS.get(topic)
    if memory is not None:
        return memory(handle, topic, payload)
    ui = _HOST_TOPICS.get(topic)
    if ui is not None:
        return ui(payload)
    log.debug("ignored worker event %r", topic)
    return None


def _progress(payload: Any) -> None:
    value, total, preview = payload
    utils = sys.modules.get("comfy.utils")
    hook = getattr(utils, "PROGRESS_BAR_HOOK", None)
    if hook is not None:
        hook(value, total, server_bridge.preview(preview))


def _send_sync(payload: Any) -> None:
    event, data, sid = payload
    server = server_bridge.prompt_server()
    data = server_bridge.ui_data(event, data)
    if server is not None and data is not server_bridge.DROP:
        server.send_sync(event, data, sid)


def _progress_text(payload: Any) -> None:
    text, node_id, sid = payload
    server = server_bridge.prompt_server()
    if server is not None:
        server.send_progress_text(text, node_id, sid)


def _interrupt(payload: Any) -> None:
    """A node raised ComfyUI's interrupt in its worker (``nodes.interrupt_processing()``): it
    is raised here with the very function that call runs natively, as ``POST /interrupt``
    runs it, so ComfyUI's executor stops before its next node (ADR 0051)."""
    mm = sys.modules.get("comfy.model_management")
    raise_it = getattr(mm, "interrupt_current_processing", None)
    if raise_it is not None:
        raise_it(True)


_HOST_TOPICS = {
    "server?": server_bridge.answer,
    "interrupt?": _interrupt,
    "progress": _progress,
    "send_sync": _send_sync,
    "progress_text": _progress_text,
}

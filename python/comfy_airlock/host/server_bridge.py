"""The host's answers to a worker's ``server`` stand-in (worker/server_shim.py): the live ids
of ComfyUI's server, its prompt queue, and ``send_sync`` data made whole again.

Questions are answered on the thread that waits for the worker's call (a node's, inside
ComfyUI's execution, or a forwarded route's), so what they read is what that call would have
read in-process.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from comfy_airlock.host import node_classes
from comfy_airlock.server_surface import QUEUE_ATTRS, QUEUE_METHODS

log = logging.getLogger("comfy_airlock")

# upstream's BinaryEventTypes (protocol.py)
_UNENCODED_PREVIEW_IMAGE = 2
_PREVIEW_IMAGE_WITH_METADATA = 4


def prompt_server() -> Any:
    server = sys.modules.get("server")
    return getattr(getattr(server, "PromptServer", None), "instance", None)


def take_pending(pending: list[Any]) -> list[Any]:
    """The routes noted since the last call, emptying ``pending``; none while ComfyUI's server
    is not up (they stay noted for the next call). The caller holds its lock."""
    if prompt_server() is None:
        return []
    todo = list(pending)
    pending.clear()
    return todo


def serve_static(pack: str, url: str, path: str, what: str) -> bool:
    """Serves ``path`` at ``url`` by a ``web.static`` entry in ``PromptServer.instance.routes``,
    as a pack adds a route (and as upstream's ``add_routes`` serves its own folders); False,
    logged naming the pack, where the server refused it."""
    server = prompt_server()
    if server is None:
        return False
    try:
        server.routes.static(url, path)
    except (RuntimeError, ValueError) as e:
        log.error("[comfy-airlock] pack %r: %s not served: %s", pack, url, e)
        return False
    log.info("[comfy-airlock] pack %r: %s %s served as %s", pack, what, path, url)
    return True


def answer(payload: Any) -> Any:
    """The answer to ``server?``; an error is a ``{"error": ...}`` the worker raises."""
    server = prompt_server()
    op = (payload or {}).get("op")
    if server is None:
        return {"error": "ComfyUI's server is not running in this host"}
    if op == "ids":
        return {
            "client_id": server.client_id,
            "last_node_id": server.last_node_id,
            "last_prompt_id": getattr(server, "last_prompt_id", None),
            "number": server.number,
        }
    if op == "set_number":
        server.number = int(payload["value"])
        return None
    if op == "queue":
        return _queue(server.prompt_queue, payload)
    if op == "node_class":
        return node_classes.surface(str(payload.get("name")))
    return {"error": f"unknown question to the server: {op!r}"}


def _queue(queue: Any, payload: dict[str, Any]) -> Any:
    method = payload.get("method")
    if method in QUEUE_ATTRS:
        with queue.mutex:
            value = getattr(queue, method)
            value = dict(value) if isinstance(value, dict) else list(value)
        return _without_secrets(value)
    if method not in QUEUE_METHODS:
        return {"error": f"prompt_queue.{method} cannot be called from an isolated pack"}
    result = getattr(queue, method)(*payload.get("args", ()), **payload.get("kwargs", {}))
    return _without_secrets(result)


def _without_secrets(value: Any) -> Any:
    """Queue items are ``(number, prompt_id, prompt, extra_data, outputs, sensitive)``: the
    sixth holds what ComfyUI keeps from everyone (API keys), so a worker gets it empty."""
    if isinstance(value, tuple) and len(value) >= 6 and isinstance(value[1], str):
        return (*value[:5], {}, *value[6:])
    if isinstance(value, (list, tuple)):
        return type(value)(_without_secrets(v) for v in value)
    if isinstance(value, dict):
        return {k: _without_secrets(v) for k, v in value.items()}
    return value


DROP = object()


def ui_data(event: Any, data: Any) -> Any:
    """``send_sync`` data as upstream's ``send`` expects it: previews as PIL images. A preview
    that cannot be made whole is ``DROP``: upstream's publish loop would die on it."""
    if event == _UNENCODED_PREVIEW_IMAGE:
        image = preview(data)
        return DROP if image is None else image
    if event == _PREVIEW_IMAGE_WITH_METADATA:
        try:
            pre, metadata = data
        except (TypeError, ValueError):
            return DROP
        image = preview(pre)
        return DROP if image is None else (image, metadata)
    return data


def preview(data: Any) -> Any:
    """A worker's preview ``(format, pixels, max_size)`` with the pixels as a PIL image, as
    upstream's progress hook and ``send`` take it (None: it cannot be made whole)."""
    if data is None:
        return None
    try:
        import numpy as np
        from PIL import Image

        fmt, pixels, max_size = data
        return (fmt, Image.fromarray(np.asarray(pixels)), max_size)
    except Exception as e:
        log.debug("preview dropped: %s", e)
        return None

"""The ``server`` module a pack imports inside a worker: ComfyUI's ``server.PromptServer`` as
packs use it, with what has an effect forwarded to the host's real server.

Upstream's own ``server.py`` cannot be imported here: it imports ``nodes`` and ``execution``
(torch, every model module) and its ``PromptServer()`` starts the frontend manager and the
user, model and asset managers. So this module gives the same names with this split:

- **Forwarded to the host** (inside a call, which is where nodes and routes run):
  ``send_sync``, ``send``, ``send_json``, ``send_bytes``, ``send_image``,
  ``send_image_with_metadata``, ``send_progress_text`` and ``queue_updated`` reach the host's
  browsers, previews included (their pixels cross as an array); ``client_id``,
  ``last_node_id``, ``last_prompt_id`` and ``number`` are read from the host's server when
  read; ``prompt_queue`` forwards its methods to the host's queue (see :class:`PromptQueue`).
- **Real here**: ``app`` (an ``aiohttp.web.Application``) and ``routes`` (a
  ``web.RouteTableDef``). The scan reports what the pack registered on them; the host mounts
  those routes and forwards their requests here (``worker/routes.py``).
- **Upstream's own**: ``user_manager`` (``app.user_manager.UserManager``, over the host's
  user directory and ``--multi-user``) and ``node_replace_manager`` (local: ComfyUI does not
  apply an isolated pack's node replacements).
- **Run for the host**: ``add_on_prompt_handler``: the host sends each ``POST /prompt`` that
  holds a node of the pack here first (its API keys left out), as upstream runs the handlers.
- **Present, local**: ``supports``, ``loop`` (the worker's event loop), ``messages``,
  ``sockets``, ``client_session`` and ``web_root`` (None).
- Everything else raises an ``AttributeError`` that says this is the worker's stand-in.

Module-level names (``BinaryEventTypes``, ``web``, ``nodes``…) follow upstream's; the modules
upstream imports are imported here only when a pack reads them.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import sys
import types
from typing import Any

from comfy_airlock.server_surface import QUEUE_ATTRS, QUEUE_METHODS
from comfy_airlock.worker import link, pack_app

log = logging.getLogger("comfy_airlock.worker")

_LOOP: asyncio.AbstractEventLoop | None = None


def event_loop() -> asyncio.AbstractEventLoop:
    """The server's event loop (``PromptServer.instance.loop``): the pack's route handlers run
    on it (on the route lane's thread, ADR 0055), and ``asyncio.get_event_loop()`` at a pack's
    import returns it, as natively. Async nodes run on a loop of their own, as upstream's
    executor runs them apart from the server's (``comfy._await``)."""
    global _LOOP
    if _LOOP is None:
        _LOOP = asyncio.new_event_loop()
        asyncio.set_event_loop(_LOOP)
    return _LOOP


# --- messages to the host ----------------------------------------------------------------


def emit_quietly(topic: str, payload: Any) -> None:
    """A message for the host's UI. The server's own (``send_sync``, ``progress_text``) reach it
    from any thread, in a call or not (ADR 0056); a progress report only in a call. One that
    cannot cross is dropped with a warning: a pack's progress report must never fail its
    node."""
    try:
        if topic in _UI_ANYTIME:
            link.send_ui(topic, payload)
        else:
            link.emit(topic, payload)
    except Exception as e:
        log.warning("dropped a %s message for the host: %s", topic, e)


_UI_ANYTIME = frozenset({"send_sync", "progress_text"})


def encode_preview(preview: Any) -> Any:
    """ComfyUI's previews are ``(format, PIL.Image, max_size)``: the pixels cross as an array."""
    try:
        fmt, image, max_size = preview
        import numpy as np

        return (fmt, np.asarray(image.convert("RGB")), max_size)
    except Exception as e:
        log.debug("preview not forwarded: %s", e)
        return None


def _ui_payload(event: Any, data: Any) -> Any:
    """``send_sync``'s data as it can cross: a PIL image of a preview event becomes pixels
    (the host makes it an image again, host/server_bridge.py)."""
    if event == BinaryEventTypes.UNENCODED_PREVIEW_IMAGE:
        return encode_preview(data)
    if event == BinaryEventTypes.PREVIEW_IMAGE_WITH_METADATA:
        image, metadata = data
        return (encode_preview(image), metadata)
    if isinstance(data, bytearray):
        return bytes(data)
    return data


def ask_host(op: str, **payload: Any) -> Any:
    """A question to the host's server. Only a call's own thread may read its lane (a node's,
    or a route handler's: ADR 0055), and only inside a call; elsewhere this raises
    ``LookupError``."""
    if not link.serves_calls() or link.LINK is None:
        raise LookupError("the host's server can be asked only from a call's own thread")
    try:
        return link.ask("server?", {"op": op, **payload})
    except Exception as e:
        if "outside a call" in str(e):
            raise LookupError(str(e)) from e
        raise


try:  # upstream's own definition, where this ComfyUI has it (a plain class, safe to import)
    from protocol import BinaryEventTypes  # type: ignore[import-not-found]
except Exception:  # older ComfyUI trees define it in server.py

    class BinaryEventTypes:  # type: ignore[no-redef]
        PREVIEW_IMAGE = 1
        UNENCODED_PREVIEW_IMAGE = 2
        TEXT = 3
        PREVIEW_IMAGE_WITH_METADATA = 4


# --- the queue ---------------------------------------------------------------------------


class PromptQueue:
    """``PromptServer.instance.prompt_queue``: the host's queue, asked method by method.

    Items come back as upstream's tuples ``(number, prompt_id, prompt, extra_data,
    outputs_to_execute, sensitive)`` with ``sensitive`` emptied: the host's secrets never
    reach a worker. Methods that take a function (``wipe_queue``'s friends that filter with a
    callable) cannot cross and say so."""

    _FORWARDED = QUEUE_METHODS

    def __getattr__(self, name: str) -> Any:
        if name in self._FORWARDED:

            def forwarded(*args: Any, **kwargs: Any) -> Any:
                return ask_host("queue", method=name, args=list(args), kwargs=kwargs)

            forwarded.__name__ = name
            return forwarded
        if name in QUEUE_ATTRS:
            return ask_host("queue", method=name, args=[], kwargs={})
        raise AttributeError(
            f"prompt_queue.{name} is not available in an isolated pack's worker "
            f"(comfy-airlock forwards {', '.join(self._FORWARDED)}, currently_running, "
            "history and queue to the host)"
        )


# --- the server --------------------------------------------------------------------------


def _host_value(name: str) -> Any:
    def get(self: PromptServer) -> Any:
        if name in self._set:
            return self._set[name]
        try:
            return ask_host("ids")[name]
        except LookupError:
            return None

    def set_(self: PromptServer, value: Any) -> None:
        if name == "number":  # the host's prompt counter (a pack queueing prompts bumps it)
            try:
                ask_host("set_number", value=int(value))
                return
            except LookupError:
                pass
        # Other ids: what a pack sets, it reads back; the host's own are ComfyUI's to set.
        self._set[name] = value

    return property(get, set_, doc=f"The host's ``PromptServer.instance.{name}``, read live.")


class PromptServer:
    """What packs use of ``server.PromptServer.instance`` in the worker."""

    instance: PromptServer

    client_id = _host_value("client_id")
    last_node_id = _host_value("last_node_id")
    last_prompt_id = _host_value("last_prompt_id")
    number = _host_value("number")

    def __init__(self) -> None:
        PromptServer.instance = self
        self._set: dict[str, Any] = {}
        self._app: Any = None
        self._routes: Any = None
        self._user_manager: Any = None
        self._node_replace_manager: Any = None
        self.supports = ["custom_nodes_from_web"]
        self.prompt_queue = PromptQueue()
        self.loop = event_loop()
        self.messages: asyncio.Queue[Any] = asyncio.Queue()
        self.client_session: Any = None
        self.sockets: dict[str, Any] = {}
        self.sockets_metadata: dict[str, Any] = {}
        self.on_prompt_handlers: list[Any] = []
        self.web_root: str | None = None

    @property
    def app(self) -> Any:
        """A real ``aiohttp.web.Application``; routes a pack adds to it are served by the host."""
        if self._app is None:
            self._app = pack_app.make_app()
        return self._app

    @property
    def user_manager(self) -> Any:
        """Upstream's own ``UserManager`` (light to import), over the host's user directory and
        ``--multi-user`` flag: ``get_request_user_id``, ``get_request_user_filepath`` and
        ``settings`` answer as in the host. Its users are read once, when first used."""
        if self._user_manager is None:
            from app.user_manager import UserManager  # type: ignore[import-not-found]

            self._user_manager = UserManager()
        return self._user_manager

    @property
    def node_replace_manager(self) -> Any:
        """Upstream's own ``NodeReplaceManager``, local to the worker: ComfyUI's builtin extra
        nodes, which the worker loads before the pack, register their replacements on it. A
        pack's own replacements stay here too: ComfyUI does not apply them (not yet)."""
        if self._node_replace_manager is None:
            from app.node_replace_manager import NodeReplaceManager  # type: ignore[import-not-found]

            self._node_replace_manager = NodeReplaceManager()
        return self._node_replace_manager

    @property
    def routes(self) -> Any:
        """A real ``aiohttp.web.RouteTableDef``, as upstream's."""
        if self._routes is None:
            from aiohttp import web

            self._routes = web.RouteTableDef()
        return self._routes

    # Messages: the host's send_sync puts them on its loop, as upstream's does.
    def send_sync(self, event: Any, data: Any, sid: str | None = None) -> None:
        emit_quietly("send_sync", (event, _ui_payload(event, data), sid))

    async def send(self, event: Any, data: Any, sid: str | None = None) -> None:
        self.send_sync(event, data, sid)

    async def send_json(self, event: Any, data: Any, sid: str | None = None) -> None:
        self.send_sync(event, data, sid)

    async def send_bytes(self, event: Any, data: Any, sid: str | None = None) -> None:
        self.send_sync(event, bytes(data), sid)

    async def send_image(self, image_data: Any, sid: str | None = None) -> None:
        self.send_sync(BinaryEventTypes.UNENCODED_PREVIEW_IMAGE, image_data, sid)

    async def send_image_with_metadata(
        self, image_data: Any, metadata: Any = None, sid: str | None = None
    ) -> None:
        self.send_sync(BinaryEventTypes.PREVIEW_IMAGE_WITH_METADATA, (image_data, metadata), sid)

    def send_progress_text(self, text: str | bytes, node_id: str, sid: str | None = None) -> None:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8", "replace")
        emit_quietly("progress_text", (text, node_id, sid))

    def encode_bytes(self, event: int, data: bytes) -> bytearray:
        if not isinstance(event, int):
            raise RuntimeError(f"Binary event types must be integers, got {event}")
        return bytearray(event.to_bytes(4, "big")) + bytearray(data)

    def get_queue_info(self) -> dict[str, Any]:
        return {"exec_info": {"queue_remaining": self.prompt_queue.get_tasks_remaining()}}

    def queue_updated(self) -> None:
        self.send_sync("status", {"status": self.get_queue_info()})

    def add_on_prompt_handler(self, handler: Any) -> None:
        # Upstream calls these in its POST /prompt handler; the host forwards each prompt that
        # holds a node of this pack here (host/on_prompt.py, worker/comfy.py:on_prompt).
        self.on_prompt_handlers.append(handler)

    def trigger_on_prompt(self, json_data: Any) -> Any:
        for handler in list(self.on_prompt_handlers):
            try:
                json_data = handler(json_data)
            except Exception:
                log.warning("an on_prompt handler of the pack raised", exc_info=True)
        return json_data

    def add_routes(self) -> None:
        """The host mounts the pack's routes (host/routes.py); nothing to do here."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"PromptServer.instance.{name} is not available in an isolated pack's worker "
            "(comfy-airlock's stand-in for ComfyUI's server; see docs/user-guide.md)"
        )


async def send_socket_catch_exception(function: Any, message: Any) -> None:
    import aiohttp

    try:
        await function(message)
    except (aiohttp.ClientError, ConnectionError) as err:
        log.warning("send error: %s", err)


# Names upstream's server.py imports at module level, imported here when a pack reads them.
_LAZY = {
    "nodes": ("nodes", None),
    "execution": ("execution", None),
    "folder_paths": ("folder_paths", None),
    "node_helpers": ("node_helpers", None),
    "comfy": ("comfy.utils", "-"),
    "aiohttp": ("aiohttp", None),
    "web": ("aiohttp.web", None),
    "args": ("comfy.cli_args", "args"),
    "Image": ("PIL.Image", None),
    "ImageOps": ("PIL.ImageOps", None),
    "PngInfo": ("PIL.PngImagePlugin", "PngInfo"),
    "BytesIO": ("io", "BytesIO"),
    "__version__": ("comfyui_version", "__version__"),
}
_STDLIB = frozenset(
    {"os", "sys", "asyncio", "traceback", "time", "uuid", "urllib", "json", "glob"}
    | {"struct", "ssl", "socket", "ipaddress", "logging", "mimetypes", "errno"}
)


def _module_getattr(name: str) -> Any:
    if name in _STDLIB:
        return importlib.import_module(name)
    if name in _LAZY:
        module, attr = _LAZY[name]
        mod = importlib.import_module(module)
        if attr == "-":  # `import comfy.utils` binds `comfy`
            return sys.modules[module.split(".")[0]]
        return getattr(mod, attr) if attr else mod
    raise AttributeError(
        f"module 'server' has no attribute {name!r} in an isolated pack's worker "
        "(comfy-airlock's stand-in for ComfyUI's server module; see docs/user-guide.md)"
    )


def install() -> types.ModuleType:
    """Puts the stand-in in ``sys.modules['server']`` with a fresh ``PromptServer.instance``."""
    module = types.ModuleType("server")
    module.__doc__ = "comfy-airlock's stand-in for ComfyUI's server module inside a worker."
    module.__file__ = __file__
    for name in ("PromptServer", "BinaryEventTypes", "send_socket_catch_exception"):
        setattr(module, name, globals()[name])
    module.__getattr__ = _module_getattr  # type: ignore[attr-defined]
    PromptServer()
    sys.modules["server"] = module
    return module

"""comfy-airlock's panel in ComfyUI's sidebar, host side (the browser side is the custom
node's ``web/airlock_panel.js``; docs/adr/0026-panel-data-flow.md).

:func:`mount` is called by the custom node once its packs are loaded: it adds the panel's
routes to ComfyUI's server and starts the thread that samples memory and sends the status over
ComfyUI's websocket. It reads through the host's public status (``loader.status()``,
``bridge.ledger_rows()``) and changes nothing of ComfyUI's.
"""

from __future__ import annotations

from typing import Any

from comfy_airlock.host import loader
from comfy_airlock.host.memory.ledger import ledger_rows
from comfy_airlock.host.panel.publisher import Publisher
from comfy_airlock.host.server_bridge import prompt_server

_PUBLISHER: list[Publisher] = []


def mount() -> Publisher | None:
    """Adds the routes and starts the publisher, once (None outside ComfyUI's server)."""
    if _PUBLISHER:
        return _PUBLISHER[0]
    server = prompt_server()
    if server is None:
        return None
    from comfy_airlock.host.panel import routes

    def send(event: str, data: Any) -> None:
        server.send_sync(event, data, None)

    def clients() -> int:
        return len(getattr(server, "sockets", None) or ())

    publisher = Publisher(loader.status, ledger_rows, send, clients)
    routes.add_routes(server.routes, publisher)
    publisher.start()
    _PUBLISHER.append(publisher)
    return publisher

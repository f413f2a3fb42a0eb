"""The panel's HTTP routes on ComfyUI's own server (``PromptServer.instance.routes``, so
upstream also serves them under ``/api``, behind its middlewares):

- ``GET /airlock/panel``: the status, its seq and the memory history (the browser's one read;
  the rest comes over the websocket, publisher.py);
- ``POST /airlock/workers/{pack}/restart`` and ``POST /airlock/workers/{pack}/release``: the
  actions (actions.py), refused as cross-origin by upstream's rule (origin.py) before anything
  runs, and run on a thread of their own, never on ComfyUI's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from comfy_airlock.host.panel import actions, origin
from comfy_airlock.host.panel.publisher import Publisher

log = logging.getLogger("comfy_airlock")

_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="airlock-panel-action")


def add_routes(routes: Any, publisher: Publisher) -> None:
    """Adds the routes to ``routes`` (an aiohttp ``RouteTableDef``)."""
    from aiohttp import web

    @routes.get("/airlock/panel")
    async def _snapshot(request: web.Request) -> web.Response:
        loop = asyncio.get_running_loop()
        return web.json_response(await loop.run_in_executor(_POOL, publisher.snapshot))

    @routes.post("/airlock/workers/{pack}/restart")
    async def _restart(request: web.Request) -> web.Response:
        return await _act(request, actions.restart, publisher)

    @routes.post("/airlock/workers/{pack}/release")
    async def _release(request: web.Request) -> web.Response:
        return await _act(request, actions.release, publisher)


async def _act(request: Any, action: Callable[[str], dict[str, Any]], publisher: Publisher) -> Any:
    from aiohttp import web

    name = request.match_info["pack"]
    why = origin.refusal(request.headers)
    if why is not None:
        log.warning("[comfy-airlock] panel: %s %s refused: %s", request.method, request.path, why)
        return web.json_response({"error": f"cross-origin request refused: {why}"}, status=403)
    loop = asyncio.get_running_loop()
    try:
        result = await loop.run_in_executor(_POOL, action, name)
    except actions.ActionError as e:
        return web.json_response({"error": str(e)}, status=e.status)
    except Exception as e:  # the worker could not be started again, say: its own words
        log.error("[comfy-airlock] panel: %s on pack %r failed: %s", action.__name__, name, e)
        return web.json_response(
            {"error": f"pack {name!r}: {action.__name__} failed: {type(e).__name__}: {e}"},
            status=500,
        )
    finally:
        publisher.nudge()
    return web.json_response(result)

"""The HTTP routes of isolated packs, mounted on ComfyUI's own server and forwarded to the
pack's worker (ADR 0017).

The scan reports every route a pack registered at import (worker/routes.py). At our custom
node's import, as a native pack would at its own, each is mounted the way the pack made it:
``PromptServer.instance.routes`` routes on the host's route table (which upstream's
``add_routes()`` later also serves under ``/api``), ``app.router`` routes, static directories
and sub-applications on the host's router (a static or sub-app prefix as itself and a
catch-all under it, as aiohttp matches them, served by the worker's own aiohttp). So no worker starts for this: the first
request starts it.

A request is read whole (ComfyUI's ``--max-upload-size`` bounds it), sent to the worker as
method, raw path, raw headers and body (plain values, no pickle), answered there by the real
handler, and its status, headers and body come back. The call runs on a thread of our own,
never on ComfyUI's event loop, and is bounded by the ``route_timeout_s`` setting. It takes the
worker's route lane, which a thread of the worker serves while a node runs on the call lane
(ADR 0055): a node that waits for a request to its pack (an image chooser's pick) gets it. A request
to a pack whose worker has not imported it (none runs, or a new one's first call is still
importing: ``IsolatedPack.imported``) first has it started and the pack imported, on a thread
pool of its own, and waits for that for the same bound plus the time a new worker has to
connect (``CONNECT_TIMEOUT_S``): a cold start is not the handler's time, and on a loaded
machine it alone took more than the whole bound (30 s in CI), so the request came too late
for any (ADR 0047).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from comfy_airlock import settings
from comfy_airlock.host.pack import WARM, IsolatedPack
from comfy_airlock.host.server_bridge import prompt_server
from comfy_airlock.supervisor import CONNECT_TIMEOUT_S

log = logging.getLogger("comfy_airlock")

TARGET = "comfy_airlock.worker.comfy:serve_route"
# How much longer than the bound the host waits for the worker's own answer (the worker
# cancels a handler past the request's expiry and answers that).
_WORKER_GRACE_S = 5.0
# Bodies above this cross as an array, through shared memory, not in a frame.
_INLINE = 1 << 20
# Set by the host's own server, not copied from the worker's.
_NOT_COPIED = {"date", "server", "content-length", "transfer-encoding", "connection"}

_LOCK = threading.Lock()
_CURRENT: dict[str, IsolatedPack] = {}
_PENDING: dict[str, list[dict[str, Any]]] = {}
_MOUNTED: set[str] = set()
_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="airlock-route")
# Cold starts wait on threads of their own: a start can take a minute, and packs whose workers
# are starting must not keep the requests of running ones waiting for a thread.
_STARTS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="airlock-route-start")


def timeout() -> float:
    """Seconds a forwarded request may take once a worker runs, waiting for the lane included
    (a worker started for the request has this plus ``CONNECT_TIMEOUT_S`` to start)."""
    return max(1.0, settings.get().route_timeout_s)


def remember(pack: IsolatedPack, routes: list[dict[str, Any]]) -> None:
    """Notes a loaded pack's routes; :func:`mount_pending` mounts them (thread-safe, since
    packs load in parallel). A reloaded pack's routes go to its new worker."""
    with _LOCK:
        _CURRENT[pack.name] = pack
        if pack.name not in _MOUNTED:
            _PENDING[pack.name] = list(routes)


def mount_pending() -> None:
    """Mounts what :func:`remember` noted, pack by pack in name order, each in the order the
    pack registered its routes."""
    server = prompt_server()
    if server is None:
        return
    with _LOCK:
        todo = sorted(_PENDING.items())
        _PENDING.clear()
        _MOUNTED.update(name for name, _ in todo)
    for name, routes in todo:
        for desc in routes:
            _mount(server, name, desc)
        if routes:
            log.info(
                "[comfy-airlock] pack %r: %d HTTP route(s) served by its worker", name, len(routes)
            )


def _mount(server: Any, name: str, desc: dict[str, Any]) -> None:
    handler = _forwarder(name)
    kind, path = desc["kind"], desc["path"]
    try:
        if kind == "route" and desc["via"] == "table":
            if _in_table(server.routes, desc["method"], path):
                log.error(
                    "[comfy-airlock] pack %r: route %s %s is already registered; the first "
                    "one is served (as ComfyUI would)",
                    name,
                    desc["method"],
                    path,
                )
                return
            # No name: upstream registers the table twice (with /api), and a name twice fails.
            server.routes.route(desc["method"], path)(handler)
        elif kind == "route":
            _add_route(server.app.router, desc["method"], path, handler, desc.get("name"))
        else:  # a static directory or a sub-application: the prefix and all under it
            # (aiohttp's resource matches the bare prefix too: a directory, 403 for a static one).
            prefix = path.rstrip("/")
            for method in ("GET", "HEAD") if kind == "static" else ("*",):
                for p in (prefix, prefix + "/{tail:.*}") if prefix else ("/{tail:.*}",):
                    _add_route(server.app.router, method, p, handler, None)
    except (RuntimeError, ValueError) as e:
        log.error("[comfy-airlock] pack %r: route %s %s not served: %s", name, kind, path, e)


def _add_route(router: Any, method: str, path: str, handler: Any, name: str | None) -> None:
    try:
        router.add_route(method, path, handler, name=name)
    except ValueError:
        if name is None:
            raise
        router.add_route(method, path, handler)  # its name is taken: served, unnamed


def _in_table(table: Any, method: str, path: str) -> bool:
    return any(
        getattr(r, "method", None) == method and getattr(r, "path", None) == path for r in table
    )


def _forwarder(name: str) -> Any:
    async def forward(request: Any) -> Any:
        return await _forward(name, request)

    forward.__name__ = f"airlock_route_{name}"
    return forward


async def _forward(name: str, request: Any) -> Any:
    from aiohttp import web

    with _LOCK:
        pack = _CURRENT.get(name)
    where = f"{request.method} {request.path}"
    if pack is None:
        return _error(web, 502, f"pack {name!r} is not loaded; {where} has no handler")
    body = await request.read()
    bound = timeout()
    loop = asyncio.get_running_loop()
    importing = 0.0
    if not pack.imported() and pack.busy and pack.alive():
        # A call runs on the call lane (a node, the first of a new worker, imports the pack as
        # it starts): a `warm` there would wait for it, and it may be waiting for this very
        # request (a chooser). The worker's route thread waits for that import itself
        # (`comfy._LOADING`), so the request goes at once, its expiry counting the import too.
        importing = CONNECT_TIMEOUT_S
    elif not pack.imported():
        start = bound + CONNECT_TIMEOUT_S
        try:  # the start goes on after a timeout here: the next request finds the worker up
            await asyncio.wait_for(loop.run_in_executor(_STARTS, pack.call, WARM), start)
        except asyncio.TimeoutError:
            msg = f"pack {name!r}'s worker was not ready (started, the pack imported) within"
            return _error(
                web,
                504,
                f"{msg} {start:.0f} s for {where} ({settings.ENV['route_timeout_s']}); "
                "it goes on starting",
            )
        except Exception as e:
            return _failed(web, name, where, e)
    req = {
        "method": request.method,
        "path": request.raw_path,
        "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in request.raw_headers],
        "body": _crossing(body),
        # The worker does not start a request the host has given up on.
        "expires": time.time() + bound + importing,
    }
    try:  # on the route lane: beside a node of the pack that runs, maybe waiting for this
        reply = await asyncio.wait_for(
            loop.run_in_executor(_POOL, pack.route, TARGET, req),
            bound + importing + _WORKER_GRACE_S,
        )
    except asyncio.TimeoutError:
        msg = f"pack {name!r} did not answer {where} within {bound:.0f} s ({settings.ENV['route_timeout_s']})"
        return _error(web, 504, msg)
    except Exception as e:
        return _failed(web, name, where, e)
    return _response(web, reply, request.method)


def _failed(web: Any, name: str, where: str, e: Exception) -> Any:
    first = f"{type(e).__name__}: {e}".splitlines()[0][:500]
    log.error("[comfy-airlock] pack %r could not answer %s: %s", name, where, first)
    return _error(web, 502, f"pack {name!r} could not answer {where}: {first}")


def _error(web: Any, status: int, text: str) -> Any:
    return web.Response(status=status, text=f"[comfy-airlock] {text}")


def _crossing(body: bytes) -> Any:
    if len(body) <= _INLINE:
        return body
    import numpy as np

    return np.frombuffer(body, dtype=np.uint8)


def _response(web: Any, reply: dict[str, Any], method: str) -> Any:
    from multidict import CIMultiDict

    body = reply["body"]
    if not isinstance(body, bytes):
        body = body.tobytes()
    headers = CIMultiDict()
    length = None
    for k, v in reply["headers"]:
        if k.lower() == "content-length":
            length = v
        elif k.lower() not in _NOT_COPIED:
            headers.add(k, v)
    status, reason = reply["status"], reply.get("reason")
    if method == "HEAD" and length is not None:
        # No body, but the length of the one a GET would get, as the worker said.
        headers["Content-Length"] = length
        return web.Response(status=status, reason=reason, headers=headers)
    resp = web.Response(status=status, reason=reason, body=body, headers=headers)
    if length is None and status not in (204, 304) and method != "HEAD":
        resp.enable_chunked_encoding()  # as the worker sent it (a stream, an error page)
    return resp

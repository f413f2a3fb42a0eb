"""A pack's HTTP routes in its worker: what it registered (for the scan), and serving the
requests the host forwards (ADR 0017).

The pack registers routes on a real ``aiohttp.web.Application`` and ``RouteTableDef`` (the
stand-in ``PromptServer.instance.app`` / ``.routes``). A forwarded request is written, as the
raw HTTP/1.1 message the host received, into one end of a socket pair whose other end a real
aiohttp server of that application reads, on the worker's event loop: the pack's handler sees
a real ``web.Request`` (match info, query, headers, ``json()``, ``post()``, multipart,
``read()``), its middlewares run, and a ``FileResponse`` or ``StreamResponse`` is written
exactly as aiohttp writes it. The response is read back off the socket and returned as
status, reason, headers and body.
"""

from __future__ import annotations

import asyncio
import http.client
import io
import logging
import socket
import time
from typing import Any

from comfy_airlock import settings
from comfy_airlock.worker import pack_app, server_shim

log = logging.getLogger("comfy_airlock.worker")

# Responses larger than this are refused (their body crosses in one piece).
MAX_RESPONSE = settings.get().route_max_bytes
# Bodies above this cross as an array, through shared memory, not in a frame.
_INLINE = 1 << 20
_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
}

_RUNNER: Any = None


def describe() -> list[dict[str, Any]]:
    """Every route the pack registered, in order: on ``app`` (mounted on the host's router)
    and on ``routes`` (mounted on the host's route table, which upstream also serves under
    ``/api``)."""
    server = server_shim.PromptServer.instance
    out: list[dict[str, Any]] = []
    if server._app is not None:
        out.extend(_describe_app(server._app))
    if server._routes is not None:
        out.extend(_describe_table(server._routes))
    return out


def _describe_app(app: Any) -> list[dict[str, Any]]:
    from aiohttp import web

    out: list[dict[str, Any]] = []
    for resource in app.router.resources():
        info = resource.get_info()
        name = resource.name
        if isinstance(resource, web.StaticResource):
            out.append({"via": "app", "kind": "static", "path": info["prefix"], "name": name})
        elif "prefix" in info and "app" in info:  # a sub-application
            out.append({"via": "app", "kind": "prefix", "path": info["prefix"], "name": name})
        else:
            path = pack_app.RAW_PATHS.get(id(resource), info.get("path"))
            if path is None:
                log.warning("route %r of the pack cannot be described; not served", resource)
                continue
            for route in resource:
                route_ = {"via": "app", "kind": "route", "method": route.method, "path": path}
                out.append({**route_, "name": name})
    return out


def _describe_table(table: Any) -> list[dict[str, Any]]:
    from aiohttp import web

    out: list[dict[str, Any]] = []
    for item in table:
        if isinstance(item, web.StaticDef):
            name = item.kwargs.get("name")
            out.append({"via": "table", "kind": "static", "path": item.prefix, "name": name})
        elif isinstance(item, web.RouteDef):
            name = item.kwargs.get("name")
            route_ = {"via": "table", "kind": "route", "method": item.method, "path": item.path}
            out.append({**route_, "name": name})
    return out


# --- serving -----------------------------------------------------------------------------


def serve(request: dict[str, Any]) -> dict[str, Any]:
    """Answers one request the host forwarded (``comfy.serve_route`` loads the pack first)."""
    left = float(request["expires"]) - time.time()
    if left <= 0:  # it waited for the lane longer than the host waits for it: not run
        return _plain(504, "the request waited too long for the pack's worker; not run")
    raw = _raw_request(request)
    loop = server_shim.event_loop()
    try:
        data = loop.run_until_complete(asyncio.wait_for(_exchange(raw), left))
    except asyncio.TimeoutError:
        return _plain(504, f"the pack's handler did not answer within {left:.0f} s")
    return _parse(data, request["method"])


def _plain(status: int, text: str) -> dict[str, Any]:
    return {
        "status": status,
        "reason": None,
        "headers": [["Content-Type", "text/plain; charset=utf-8"]],
        "body": text.encode(),
    }


def _raw_request(request: dict[str, Any]) -> bytes:
    body = request["body"]
    if not isinstance(body, bytes):  # an array through shared memory
        body = body.tobytes()
    head = [f"{request['method']} {request['path']} HTTP/1.1"]
    for k, v in request["headers"]:
        if k.lower() not in _HOP and k.lower() != "content-length":
            head.append(f"{k}: {v}")
    if not any(k.lower() == "host" for k, _ in request["headers"]):
        head.append("Host: localhost")  # HTTP/1.0 clients may omit it; HTTP/1.1 requires it
    head.append(f"Content-Length: {len(body)}")
    head.append("Connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


async def _runner() -> Any:
    global _RUNNER
    if _RUNNER is None:
        from aiohttp import web

        server = server_shim.PromptServer.instance
        app = server.app
        # As upstream's add_routes(): the table under /api too (static ones only as they are).
        api = web.RouteTableDef()
        for item in server.routes:
            if isinstance(item, web.RouteDef):
                api.route(item.method, "/api" + item.path)(item.handler, **item.kwargs)
        app.add_routes(api)
        app.add_routes(server.routes)
        # handler_cancellation: a request the host gave up on stops (aiohttp >= 3.9).
        runner = web.AppRunner(
            app, handle_signals=False, access_log=None, handler_cancellation=True
        )
        try:
            await runner.setup()
        except TypeError:
            runner = web.AppRunner(app, handle_signals=False, access_log=None)
            await runner.setup()
        _RUNNER = runner
    return _RUNNER


async def _exchange(raw: bytes) -> bytes:
    runner = await _runner()
    ours, theirs = socket.socketpair()
    loop = asyncio.get_running_loop()
    try:
        await loop.connect_accepted_socket(runner.server, theirs)
    except BaseException:
        ours.close()
        theirs.close()
        raise
    # From here each socket belongs to its transport: closing a transport closes its socket
    # (closing the socket under a live transport would leave a stale fd in the selector).
    reader, writer = await asyncio.open_connection(sock=ours)
    try:
        writer.write(raw)
        await writer.drain()
        chunks: list[bytes] = []
        size = 0
        while chunk := await reader.read(1 << 20):
            size += len(chunk)
            if size > MAX_RESPONSE + (1 << 16):
                raise ValueError(
                    f"the response is over {settings.ENV['route_max_bytes']} ({MAX_RESPONSE} bytes)"
                )
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        writer.close()


class _Bytes:
    """What ``http.client.HTTPResponse`` reads from: the response, already received."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(io.BytesIO(self._data))


def _parse(data: bytes, method: str) -> dict[str, Any]:
    """Status, reason, headers (in order, repeated ones kept) and the de-chunked body."""
    resp = http.client.HTTPResponse(_Bytes(data), method=method)  # type: ignore[arg-type]
    resp.begin()
    body = resp.read()
    headers = [[k, v] for k, v in resp.getheaders() if k.lower() not in _HOP]
    return {
        "status": resp.status,
        "reason": resp.reason,
        "headers": headers,
        "body": _crossing(body),
    }


def _crossing(body: bytes) -> Any:
    if len(body) <= _INLINE:
        return body
    try:
        import numpy as np
    except ImportError:
        return body
    return np.frombuffer(body, dtype=np.uint8)

"""Pack routes without ComfyUI: the worker's record of what a pack registered and its serving
through a real aiohttp server (worker/routes.py), the host's mounting rules and error answers
(host/routes.py), and what the host tells a worker about its queue (host/server_bridge.py).

The end-to-end comparison with native packs is tests/comfyui/test_pack_routes.py.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time

import pytest

pytest.importorskip("aiohttp")
from aiohttp import web

from comfy_airlock import values
from comfy_airlock.host import routes as host_routes
from comfy_airlock.host import server_bridge
from comfy_airlock.worker import routes as worker_routes
from comfy_airlock.worker import server_shim


@pytest.fixture
def shim():
    """A fresh ``server`` stand-in in this process, taken away again afterwards."""
    saved = sys.modules.get("server")
    server_shim._LOOP = None
    worker_routes._RUNNER = None
    module = server_shim.install()
    yield module
    loop = server_shim._LOOP
    if worker_routes._RUNNER is not None:
        loop.run_until_complete(worker_routes._RUNNER.cleanup())
    worker_routes._RUNNER = None
    server_shim._LOOP = None
    asyncio.set_event_loop(None)
    loop.close()
    if saved is None:
        sys.modules.pop("server", None)
    else:
        sys.modules["server"] = saved


async def _ok(request):
    return web.Response(text=f"{request.method} {request.path} {dict(request.match_info)}")


def test_the_scan_records_every_kind_of_route_in_order(shim, tmp_path):
    ps = shim.PromptServer.instance
    ps.app.router.add_get("/a/{n:\\d+}", _ok, name="a")
    ps.app.router.add_static("/files/", tmp_path)
    sub = web.Application()
    sub.router.add_get("/x", _ok)
    ps.app.add_subapp("/sub", sub)
    ps.app.add_routes([web.post("/b", _ok)])
    ps.routes.get("/t/{name}")(_ok)
    ps.routes.static("/tstatic", tmp_path)
    got = [(r["via"], r["kind"], r.get("method"), r["path"]) for r in worker_routes.describe()]
    assert got == [
        ("app", "route", "HEAD", "/a/{n:\\d+}"),
        ("app", "route", "GET", "/a/{n:\\d+}"),
        ("app", "static", None, "/files"),
        ("app", "prefix", None, "/sub"),
        ("app", "route", "POST", "/b"),
        ("table", "route", "GET", "/t/{name}"),
        ("table", "static", None, "/tstatic"),
    ]
    assert worker_routes.describe()[0]["name"] == "a"


def _serve(method: str, path: str, body: bytes = b"", headers=()) -> dict:
    req = {
        "method": method,
        "path": path,
        "headers": [["Host", "h"], *headers],
        "body": body,
        "expires": time.time() + 10,
    }
    raw = worker_routes._raw_request(req)
    loop = server_shim.event_loop()
    data = loop.run_until_complete(asyncio.wait_for(worker_routes._exchange(raw), 10))
    return worker_routes._parse(data, method)


def test_a_forwarded_request_reaches_the_real_handler(shim, tmp_path):
    (tmp_path / "f.txt").write_text("file body")
    ps = shim.PromptServer.instance

    @ps.routes.post("/echo/{k}")
    async def echo(request):
        data = await request.json()
        return web.json_response(
            {"k": request.match_info["k"], "q": request.query.getall("q", []), "data": data},
            headers={"X-Two": "2"},
        )

    ps.app.router.add_static("/s", tmp_path)
    r = _serve("POST", "/echo/7?q=1&q=2", b'{"a": 1}', [["Content-Type", "application/json"]])
    assert r["status"] == 200
    assert r["body"] == b'{"k": "7", "q": ["1", "2"], "data": {"a": 1}}'
    assert ["X-Two", "2"] in r["headers"]
    # Upstream serves its route table under /api too; the worker does the same.
    assert _serve("POST", "/api/echo/8", b"{}")["status"] == 200
    r = _serve("GET", "/s/f.txt", headers=[["Range", "bytes=0-3"]])
    assert (r["status"], r["body"]) == (206, b"file")
    assert _serve("GET", "/nope")["status"] == 404


def test_big_bodies_cross_as_arrays():
    np = pytest.importorskip("numpy")
    small = worker_routes._crossing(b"x" * 100)
    big = worker_routes._crossing(b"y" * (2 << 20))
    assert small == b"x" * 100
    assert isinstance(big, np.ndarray) and big.tobytes() == b"y" * (2 << 20)


def test_a_request_the_host_gave_up_on_is_not_run(shim, monkeypatch):
    # Importing the worker's ComfyUI side registers the worker's codecs (a pack's kept values
    # resolve to the objects a worker holds): in this process, the host of later tests, they
    # would stand in for the host's own. The registries are put back when the test ends.
    for registry in ("_BY_TYPE", "_BY_NAME", "_BY_CLASS_NAME"):
        monkeypatch.setattr(values, registry, dict(getattr(values, registry)))
    from comfy_airlock.worker import comfy  # its import installs the stand-in once more

    ran = []
    sys.modules["server"].PromptServer.instance.routes.get("/late")(lambda r: ran.append(1))
    monkeypatch.setattr(comfy, "_load_pack", lambda: None, raising=False)
    req = {"method": "GET", "path": "/late", "headers": [], "body": b"", "expires": time.time()}
    assert comfy.serve_route(req)["status"] == 504
    assert ran == []


# --- the host's side ---------------------------------------------------------------------


class _Server:
    def __init__(self) -> None:
        self.app = web.Application()
        self.routes = web.RouteTableDef()


def test_routes_mount_as_the_pack_made_them(caplog):
    server = _Server()
    table_route = {"via": "table", "kind": "route", "method": "GET", "path": "/p/t"}
    descs = [
        {"via": "app", "kind": "route", "method": "POST", "path": "/p/a/{x}", "name": "pa"},
        {"via": "app", "kind": "static", "path": "/p/static", "name": None},
        table_route,
        dict(table_route),  # the same again: skipped, the first one is served
    ]
    with caplog.at_level(logging.ERROR, "comfy_airlock"):
        for d in descs:
            host_routes._mount(server, "pk", d)
    assert [(r.method, r.path) for r in server.routes] == [("GET", "/p/t")]
    on_app = [(r.method, r.resource.canonical) for r in server.app.router.routes()]
    # A static prefix is mounted bare too, as aiohttp matches it (a directory: 403).
    assert on_app == [
        ("POST", "/p/a/{x}"),
        ("GET", "/p/static"),
        ("GET", "/p/static/{tail}"),
        ("HEAD", "/p/static"),
        ("HEAD", "/p/static/{tail}"),
    ]
    assert "pack 'pk': route GET /p/t is already registered" in caplog.text


class _Pack:
    """The host's view of a pack (IsolatedPack's ``imported``, ``call`` and ``route``): any call
    to a pack with no worker running first starts one, taking ``start_s``; a request (on the
    route lane) is answered with the time it had left when it arrived, as the worker's
    ``serve`` measures it."""

    def __init__(
        self,
        name: str,
        reply=None,
        error: Exception | None = None,
        start_s: float | None = None,
        answer_s: float = 0.0,
        busy: int = 0,
    ) -> None:
        self.name = name
        self.reply = reply
        self.error = error
        self.start_s = start_s
        self.answer_s = answer_s  # how long the handler takes
        self.busy = busy  # calls in flight on the call lane
        self.calls: list = []
        self.left: list[float] = []

    def imported(self) -> bool:
        return self.start_s is None

    def alive(self) -> bool:
        return self.start_s is None or self.busy > 0

    def call(self, target: str, *args):
        if self.start_s is not None:
            time.sleep(self.start_s)
            self.start_s = None
        self.calls.append((target, *args))
        if self.error is not None:
            raise self.error
        return self.reply

    def route(self, target: str, *args):  # the route lane: the worker runs
        assert self.start_s is None or self.busy, "a request went to a pack not importing"
        self.calls.append((target, *args))
        if self.error is not None:
            raise self.error
        self.left.append(args[0]["expires"] - time.time())
        time.sleep(self.answer_s)
        return self.reply


async def _through_host(pack: _Pack, method: str, path: str) -> tuple[int, dict, bytes]:
    from aiohttp.test_utils import TestClient, TestServer

    server = _Server()
    host_routes.remember(pack, [])
    host_routes._mount(
        server, pack.name, {"via": "app", "kind": "route", "method": method, "path": "/r"}
    )
    async with TestClient(TestServer(server.app)) as client:
        resp = await client.request(method, path, data=b"payload", headers={"X-In": "1"})
        return resp.status, dict(resp.headers), await resp.read()


def test_the_host_returns_what_the_worker_answered():
    reply = {
        "status": 201,
        "reason": "Made",
        "headers": [["Content-Type", "text/x-test"], ["Content-Length", "2"], ["X-A", "1"]],
        "body": b"hi",
    }
    pack = _Pack("unit-ok", reply)
    status, headers, body = asyncio.run(_through_host(pack, "POST", "/r?z=1"))
    assert (status, body) == (201, b"hi")
    assert headers["Content-Type"] == "text/x-test" and headers["X-A"] == "1"
    ((target, req),) = pack.calls  # a running worker: no start first
    assert target == host_routes.TARGET
    assert (req["method"], req["path"], req["body"]) == ("POST", "/r?z=1", b"payload")
    assert ["X-In", "1"] in req["headers"]


def test_a_worker_that_cannot_answer_is_a_502_naming_the_pack():
    pack = _Pack("unit-dead", error=RuntimeError("worker 'unit-dead' died (signal 9)"))
    status, _, body = asyncio.run(_through_host(pack, "GET", "/r"))
    assert status == 502
    assert b"pack 'unit-dead' could not answer GET /r: RuntimeError: worker" in body


_SMALL = {"status": 200, "reason": None, "headers": [], "body": b"up"}


def test_a_cold_start_is_not_the_handlers_time(monkeypatch):
    # A start that takes most of the bound: the request still reaches the handler with the
    # whole bound ahead of it (CI's loaded machine spent all 30 s of one on a start).
    monkeypatch.setattr(host_routes, "timeout", lambda: 1.0)
    pack = _Pack("unit-cold", _SMALL, start_s=0.8)
    status, _, body = asyncio.run(_through_host(pack, "GET", "/r"))
    assert (status, body) == (200, b"up")
    assert [c[0] for c in pack.calls] == [host_routes.WARM, host_routes.TARGET]
    assert pack.left[0] > 0.9, pack.left


def test_a_start_past_its_bound_is_a_504_and_goes_on(monkeypatch):
    monkeypatch.setattr(host_routes, "timeout", lambda: 1.0)
    monkeypatch.setattr(host_routes, "CONNECT_TIMEOUT_S", 0.0)
    pack = _Pack("unit-slow", _SMALL, start_s=2.0)
    t0 = time.monotonic()
    status, _, body = asyncio.run(_through_host(pack, "GET", "/r"))
    assert time.monotonic() - t0 < 1.8
    assert status == 504
    assert (
        b"pack 'unit-slow''s worker was not ready (started, the pack imported) within 1 s for GET /r"
        in body
    )
    deadline = time.monotonic() + 10
    while not pack.imported():  # the start was not abandoned: the next request finds it up
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert asyncio.run(_through_host(pack, "GET", "/r"))[0] == 200


def test_starting_workers_do_not_keep_a_running_packs_request_waiting(monkeypatch):
    # More packs starting at once than the route pool has threads (a page that asks each
    # pack's routes as it loads): a request to a pack whose worker runs is answered at once.
    monkeypatch.setattr(host_routes, "timeout", lambda: 1.0)
    monkeypatch.setattr(host_routes, "CONNECT_TIMEOUT_S", 10.0)
    cold = [_Pack(f"unit-cold{i}", _SMALL, start_s=3.0) for i in range(5)]
    warm = _Pack("unit-warm", _SMALL)

    async def both():
        starting = [asyncio.create_task(_through_host(p, "GET", "/r")) for p in cold]
        await asyncio.sleep(0.3)
        status = (await _through_host(warm, "GET", "/r"))[0]
        # Answered while every start still ran (not behind one, as on the route pool).
        pending = sum(1 for p in cold if p.start_s is not None)
        return status, pending, [r[0] for r in await asyncio.gather(*starting)]

    status, pending, started = asyncio.run(both())
    assert status == 200 and pending == len(cold), pending
    assert started == [200] * 5


def test_a_request_while_a_call_imports_the_pack_goes_at_once(monkeypatch):
    """Easy-Use's chooser, the first node of a new worker: its call imports the pack, then
    waits for the page's pick. A `warm` on the call lane would wait for that node; the request
    goes on the route lane at once, whose thread waits for the import in the worker, and its
    expiry counts the import's time too (the connect bound)."""
    monkeypatch.setattr(host_routes, "timeout", lambda: 1.0)
    monkeypatch.setattr(host_routes, "CONNECT_TIMEOUT_S", 30.0)
    pack = _Pack("unit-importing", _SMALL, start_s=60.0, busy=1)
    t0 = time.monotonic()
    status, _, body = asyncio.run(_through_host(pack, "POST", "/r"))
    assert (status, body) == (200, b"up")
    assert time.monotonic() - t0 < 10
    assert [c[0] for c in pack.calls] == [host_routes.TARGET]  # no warm on the call lane
    assert pack.left[0] > 30.0, pack.left


def test_a_slow_handler_is_a_504_naming_the_pack(monkeypatch):
    monkeypatch.setattr(host_routes, "timeout", lambda: 0.5)
    monkeypatch.setattr(host_routes, "_WORKER_GRACE_S", 0.0)
    slow = _Pack("unit-slow-handler", _SMALL, answer_s=2.0)
    status, _, body = asyncio.run(_through_host(slow, "POST", "/r"))
    assert status == 504
    assert b"pack 'unit-slow-handler' did not answer POST /r within" in body


def test_queue_items_reach_a_worker_without_their_secrets():
    item = (3, "pid-1", {"1": {}}, {"client_id": "c"}, ["1"], {"api_key_comfy_org": "k"})
    running = [item]
    assert server_bridge._without_secrets((running, [])) == (
        [(3, "pid-1", {"1": {}}, {"client_id": "c"}, ["1"], {})],
        [],
    )
    assert server_bridge._without_secrets({3: item})[3][5] == {}


def test_server_module_names_are_upstreams(shim):
    import server

    assert server.BinaryEventTypes.UNENCODED_PREVIEW_IMAGE == 2
    assert server.web is web
    assert server.PromptServer.instance.loop is server_shim.event_loop()
    assert server.PromptServer.instance.client_id is None  # outside a call
    with pytest.raises(AttributeError, match="stand-in"):
        server.PromptServer.instance.no_such_thing  # noqa: B018
    with pytest.raises(AttributeError, match="stand-in"):
        server.no_such_name  # noqa: B018

"""End to end: the HTTP routes and the ``server`` module of isolated packs, against the same
packs loaded natively in the same real ComfyUI 0.30.0 (the oracle).

The server holds two copies of each fixture pack: ``custom_nodes/routes-native`` and
``isolated_nodes/routes-iso`` (tests/packs/routes-pack), ``custom_nodes/serverapi-native`` and
``isolated_nodes/serverapi-iso`` (tests/packs/server-api-pack). Each copy prefixes its routes
and node names with its folder name, so a request to ``/routes-native/x`` and one to
``/routes-iso/x`` must get the same answer, the second from the pack's worker.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from .harness import ComfyUI, make_base_dir

REPO = Path(__file__).resolve().parents[2]
TEST_PACKS = REPO / "tests" / "packs"
AIRLOCK_HOME = Path(os.environ.get("AIRLOCK_TEST_HOME") or REPO / ".cache" / "test-airlock-home")
ROUTE_TIMEOUT = 30


@pytest.fixture(scope="module")
def server(comfyui_dir, tmp_path_factory):
    # Copies, not links: each copy names itself after its folder (a link would resolve).
    base = make_base_dir(
        tmp_path_factory.mktemp("routes"),
        custom_nodes={
            "comfy-airlock": REPO / "custom_node",
            "routes-native": TEST_PACKS / "routes-pack",
            "serverapi-native": TEST_PACKS / "server-api-pack",
        },
        isolated={
            "routes-iso": TEST_PACKS / "routes-pack",
            "serverapi-iso": TEST_PACKS / "server-api-pack",
        },
        copy=True,
    )
    env = {"AIRLOCK_HOME": str(AIRLOCK_HOME), "AIRLOCK_ROUTE_TIMEOUT": str(ROUTE_TIMEOUT)}
    ui = ComfyUI(comfyui_dir, base, env=env, startup_timeout=1200, start=False)
    ui.start()
    yield ui
    ui.stop()


def fetch(ui: ComfyUI, method: str, path: str, body: bytes | None = None, headers=None):
    """(status, reason, headers, body) of one request; HTTP errors are answers too."""
    req = urllib.request.Request(ui.url + path, data=body, method=method, headers=headers or {})
    try:
        # The server's longest answer: a worker's start (the bound plus 60 s to connect), then
        # the handler (the bound plus 5 s), with room to spare.
        with urllib.request.urlopen(req, timeout=2 * ROUTE_TIMEOUT + 95) as r:
            return r.status, r.reason, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.reason, e.headers, e.read()


def multipart(fields: list[tuple[str, str | None, bytes]]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    out = b""
    for name, filename, data in fields:
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += f"--{boundary}\r\nContent-Disposition: {disp}\r\n".encode()
        if filename:
            out += b"Content-Type: application/octet-stream\r\n"
        out += b"\r\n" + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


FILE = bytes(range(256)) * 1200
FORM, FORM_TYPE = multipart([("a", None, b"one"), ("up", "f.bin", FILE)])
PARTS, PARTS_TYPE = multipart([("x", None, b"1"), ("y", "y.dat", os.urandom(70_000))])
BINARY = os.urandom(300_000)
JSON = {"Content-Type": "application/json"}

# (method, path under the pack's prefix, body, headers)
REQUESTS = [
    ("GET", "/app/item/42?a=1&a=2&b=x", None, {}),
    ("GET", "/app/item/42/deep/er", None, {}),
    ("GET", "/app/item/abc", None, {}),
    ("POST", "/app/post", b'{"k": [1, 2]}', JSON),
    ("PATCH", "/app/any", b"", {}),
    ("GET", "/app/any", None, {}),
    ("GET", "/static/hello.txt", None, {}),
    ("HEAD", "/static/hello.txt", None, {}),
    ("GET", "/static/nope.txt", None, {}),
    # The prefix itself, without a file (KJNodes' GET /kjweb_async): a directory, 403 natively.
    ("GET", "/static", None, {}),
    ("GET", "/app/listed", None, {}),
    ("GET", "/module-routes", None, {}),
    ("GET", "/echo?q=1&q=2&z=%20sp", None, {"X-Custom": "yes", "Cookie": "c=biscuit"}),
    ("POST", "/json", json.dumps({"a": "é", "n": None}).encode(), JSON),
    ("POST", "/form", b"k=v&k2=%C3%A9", {"Content-Type": "application/x-www-form-urlencoded"}),
    ("POST", "/form", FORM, {"Content-Type": FORM_TYPE}),
    ("POST", "/multipart", PARTS, {"Content-Type": PARTS_TYPE}),
    ("POST", "/binary", BINARY, {"Content-Type": "application/octet-stream"}),
    ("GET", "/big?n=3000000", None, {}),
    ("GET", "/file", None, {}),
    ("GET", "/file", None, {"Range": "bytes=7-12"}),
    ("HEAD", "/file", None, {}),
    ("GET", "/text", None, {}),
    ("GET", "/stream", None, {}),
    ("GET", "/missing", None, {}),
    ("PUT", "/put/k1", b"put-body", {"Content-Type": "text/plain"}),
    ("DELETE", "/put/k1", None, {}),
    ("GET", "/user", None, {"comfy-user": "default"}),
]
COMPARED_HEADERS = (
    "Content-Type",
    "Content-Range",
    "Content-Disposition",
    "Accept-Ranges",
    "Cache-Control",
    "Set-Cookie",
    "X-Pack",
    "X-Sha",
)


def _api(prefix: str, path: str) -> str:
    return "/api" + prefix + path


@pytest.mark.parametrize(
    "method,path,body,headers", REQUESTS, ids=[f"{m} {p}" for m, p, *_ in REQUESTS]
)
def test_route_answers_as_native(server, method, path, body, headers):
    native = fetch(server, method, "/routes-native" + path, body, headers)
    iso = fetch(server, method, "/routes-iso" + path, body, headers)
    assert iso[0] == native[0], (iso[3][:500], server.log_tail(40))
    assert iso[1] == native[1]
    for h in COMPARED_HEADERS:
        assert iso[2].get_all(h) == native[2].get_all(h), h
    assert iso[3].replace(b"routes-iso", b"routes-native") == native[3]
    # The length of what was sent (bodies that name the prefix differ by its length).
    lengths = [r[2].get("Content-Length") for r in (native, iso)]
    if method == "HEAD":
        assert lengths[0] == lengths[1] is not None
    else:
        assert lengths == [
            str(len(native[3])) if lengths[0] else None,
            str(len(iso[3])) if lengths[1] else None,
        ]
        assert (lengths[0] is None) == (lengths[1] is None)


def test_table_routes_are_served_under_api_too(server):
    for prefix in ("/routes-native", "/routes-iso"):
        status, _, _, body = fetch(server, "GET", _api(prefix, "/echo?q=1"), None, {})
        assert status == 200, body
        assert json.loads(body)["path"] == _api(prefix, "/echo")
    # app.router routes are not (upstream adds /api only to its route table)
    assert fetch(server, "GET", _api("/routes-iso", "/app/listed"))[0] == 404
    assert fetch(server, "GET", _api("/routes-native", "/app/listed"))[0] == 404


def _workers(ui: ComfyUI) -> dict:
    return {row["pack"]: row for row in ui.get("/airlock/workers")}


def test_routes_run_in_the_pack_worker(server):
    native = json.loads(fetch(server, "GET", "/routes-native/where")[3])
    iso = json.loads(fetch(server, "GET", "/routes-iso/where")[3])
    row = _workers(server)["routes-iso"]
    assert row["state"] == "running"
    assert iso["pid"] == row["pid"] != native["pid"] == server.proc.pid
    assert iso["output"] == native["output"]


def test_send_sync_from_a_route_reaches_the_browser(server):
    for prefix in ("/routes-native", "/routes-iso"):
        assert fetch(server, "GET", prefix + "/notify")[0] == 200
        msg = server.wait_message(
            type="routes-pack.notify",
            timeout=30,
            predicate=lambda m, p=prefix: m["data"] == {"from": p},
        )
        assert msg["data"] == {"from": prefix}


def _wait_dead(ui: ComfyUI, pack: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while _workers(ui)[pack]["state"] == "running":
        assert time.monotonic() < deadline, _workers(ui)[pack]
        time.sleep(0.2)


def test_first_request_starts_a_stopped_worker(server):
    assert fetch(server, "GET", "/routes-iso/where")[0] == 200
    pid = _workers(server)["routes-iso"]["pid"]
    os.kill(pid, signal.SIGKILL)
    _wait_dead(server, "routes-iso")
    status, _, _, body = fetch(server, "GET", "/routes-iso/where")
    assert status == 200, body
    assert json.loads(body)["pid"] not in (pid, None)
    assert _workers(server)["routes-iso"]["state"] == "running"


def test_a_worker_gone_under_a_request_is_a_502_naming_the_pack(server):
    status, _, _, body = fetch(server, "GET", "/routes-iso/crash")
    assert status == 502, body
    text = body.decode()
    assert "routes-iso" in text and "GET /routes-iso/crash" in text, text
    assert server.alive
    # The next request starts the pack's worker again.
    assert fetch(server, "GET", "/routes-iso/module-routes")[0] == 200


def test_a_route_that_does_not_answer_is_a_504_in_bounded_time(server):
    assert fetch(server, "GET", "/routes-iso/where")[0] == 200  # worker up
    t0 = time.monotonic()
    status, _, _, body = fetch(server, "GET", "/routes-iso/slow?s=300")
    took = time.monotonic() - t0
    assert status == 504, body
    assert "routes-iso" in body.decode() or "did not answer" in body.decode(), body
    assert ROUTE_TIMEOUT - 2 <= took <= ROUTE_TIMEOUT + 20
    # The handler was cancelled: the worker answers the next request at once.
    t0 = time.monotonic()
    assert fetch(server, "GET", "/routes-iso/module-routes")[0] == 200
    assert time.monotonic() - t0 < 10


def test_a_node_that_waits_for_its_packs_route_gets_the_request(server):
    """The image chooser's shape: the node shows its choices, then waits, while it runs, for
    the page to POST the pick to the pack's route. Isolated, the request takes the worker's
    route lane, served while the node runs on the call lane (ADR 0055); before, it waited for
    the node, which waited for it, until the route's bound (a 504)."""
    for name in ("routes-native", "routes-iso"):
        node = {"class_type": name + "Chooser", "inputs": {"choices": "red,green,blue"}}
        prompt_id = server.queue({"1": node})
        shown = server.wait_message(
            type=name + ".choose", timeout=300, predicate=lambda m: m["data"]["id"] == "1"
        )
        assert shown["data"]["choices"] == ["red", "green", "blue"]
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        t0 = time.monotonic()
        status, _, _, body = fetch(server, "POST", f"/{name}/pick", b"id=1&message=2", form)
        took = time.monotonic() - t0
        assert status == 200, (name, body)
        # The handler read ComfyUI's queue while the node ran: the prompt is running.
        assert json.loads(body) == {"running": 1, "pending": 0}, name
        assert took < ROUTE_TIMEOUT / 2, (name, took)  # answered, not timed out behind the node
        entry = server.wait(prompt_id, timeout=120)
        assert entry["status"]["status_str"] == "success", (name, entry["status"])
        assert entry["outputs"]["1"]["text"] == ["blue"], name


def test_a_packs_own_thread_reaches_the_browser_between_calls(server):
    """Crystools' shape: a monitor thread started at the pack's import sends a message every
    second, whether a node runs or not. Isolated, those sent while no call runs take the
    worker's events lane (ADR 0056); before, they were dropped with a warning."""
    pid = json.loads(fetch(server, "GET", "/routes-iso/where")[3])["pid"]  # its worker runs
    for name, from_pid in (("routes-native", server.proc.pid), ("routes-iso", pid)):
        seen = []
        for _ in range(2):  # two in a row: it keeps coming, not just once
            msg = server.wait_message(
                type=name + ".monitor",
                timeout=30,
                predicate=lambda m, s=seen, p=from_pid: (
                    m["data"]["pid"] == p and m["data"]["beat"] not in s
                ),
            )
            seen.append(msg["data"]["beat"])
    assert "dropped a send_sync message" not in server.log_text()


def _probe_prompt(tag: str) -> dict:
    return {
        "1": {"class_type": "serverapi-nativeProbe", "inputs": {"tag": tag}},
        "2": {"class_type": "serverapi-isoProbe", "inputs": {"tag": tag}},
    }


def test_server_module_in_a_node_is_as_native(server):
    extra = {"api_key_comfy_org": "secret-key"}
    prompt_id = server.queue(_probe_prompt("p1"), extra_data=extra)
    entry = server.wait(prompt_id, timeout=300)
    assert entry["status"]["status_str"] == "success", entry["status"]
    native = json.loads(entry["outputs"]["1"]["text"][0])
    iso = json.loads(entry["outputs"]["2"]["text"][0])
    assert native["unique_id"] == native["last_node_id"] == "1"
    assert iso["unique_id"] == iso["last_node_id"] == "2"
    for report in (native, iso):
        assert report["client_id"] == server.client_id
        assert report["last_prompt_id"] == prompt_id
        assert report["running_ids"] == report["current_ids"] == [prompt_id]
        assert report["running_len"] == [6]
        assert report["events"] == [2, 3]
        assert report["number_bumped"] is True
    assert (native["queued"], native["remaining"]) == (iso["queued"], iso["remaining"])
    # Each probe took a number from ComfyUI's counter, so the next prompt's number is 2 on.
    second = server.wait(server.queue(_probe_prompt("p2")), timeout=300)
    assert second["prompt"][0] == entry["prompt"][0] + 3
    # The host's secrets stay in the host.
    assert native["sensitive"] == [{"api_key_comfy_org": "secret-key"}]
    assert iso["sensitive"] == [{}]
    # Each copy's on-prompt handler stamped its own node before ComfyUI ran the prompt, the
    # isolated one in its worker, without the API key.
    assert native["stamp"] == "serverapi-native saw key secret-key"
    assert iso["stamp"] == "serverapi-iso saw key None"

    for name, node in (("serverapi-native", "1"), ("serverapi-iso", "2")):
        msg = server.wait_message(type=name + ".event", timeout=30)
        assert msg["data"] == {"tag": "p1", "node": node}
        text = server.wait_message(
            lambda m, n=name: m["type"] == "binary" and m["event"] == 3 and n.encode() in m["data"],
            timeout=30,
        )
        assert text["data"].endswith(f"{name} says hi".encode())
    previews = [m for m in server.messages() if m["type"] == "binary" and m["event"] == 1]
    assert len(previews) >= 2
    # Both as upstream encodes them: a 4-byte PNG type, then the PNG.
    for p in previews[-2:]:
        assert p["data"][:4] == (2).to_bytes(4, "big")
        assert p["data"][4:12] == b"\x89PNG\r\n\x1a\n"

"""The panel's host side without ComfyUI: upstream's origin rule, the rate limit and the change
detection of the status events, the memory history (with the simulated card read through the
fake NVML), and the routes on a real aiohttp server. The panel in ComfyUI's own frontend, in a
real browser, is tests/comfyui/test_sidebar_panel.py."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from comfy_airlock.card import Truth
from comfy_airlock.device import SimGpu
from comfy_airlock.host.panel import origin
from comfy_airlock.host.panel.history import DeviceReader, History, rss, sample
from comfy_airlock.host.panel.publisher import (
    MEMORY_EVENT,
    MIN_GAP_S,
    STATUS_EVENT,
    Pacer,
    Publisher,
)

MIB = 1 << 20


class Headers(dict):
    """Case-insensitive lookups, as aiohttp's headers."""

    def get(self, key, default=None):
        for k, v in self.items():
            if k.lower() == key.lower():
                return v
        return default


def loopback_names(host):
    return host in ("127.0.0.1", "localhost", "::1")


@pytest.mark.parametrize(
    ("headers", "refused"),
    [
        ({"Host": "127.0.0.1:8188", "Origin": "http://127.0.0.1:8188"}, False),
        ({"Host": "127.0.0.1:8188", "Origin": "http://evil.example"}, True),
        ({"Host": "127.0.0.1:8188", "Origin": "http://evil.example:8188"}, True),
        ({"Host": "127.0.0.1:8188", "Origin": "http://127.0.0.1:9999"}, True),
        # Either side without a port: compared without ports (upstream's "weird browsers").
        ({"Host": "127.0.0.1:8188", "Origin": "http://127.0.0.1"}, False),
        ({"Host": "localhost", "Origin": "http://localhost:3000"}, False),
        ({"Host": "LOCALHOST:8188", "Origin": "http://localhost:8188"}, False),
        # Not a loopback host (a LAN address, a reverse proxy): upstream does not judge.
        ({"Host": "192.168.1.5:8188", "Origin": "http://evil.example"}, False),
        # No Origin (curl, a same-origin GET), or an opaque one: not judged either.
        ({"Host": "127.0.0.1:8188"}, False),
        ({"Host": "127.0.0.1:8188", "Origin": "null"}, False),
        ({"Host": "127.0.0.1:8188", "Sec-Fetch-Site": "cross-site"}, True),
        ({"Host": "127.0.0.1:8188", "Sec-Fetch-Site": "same-origin"}, False),
        ({"Host": "127.0.0.1:8188", "Origin": "http://127.0.0.1:port"}, True),
    ],
)
def test_origin_rule_is_upstreams(headers, refused):
    assert (origin.refusal(Headers(headers), loopback_names) is not None) == refused


def test_loopback_names_resolve_as_upstream_resolves_them():
    assert origin.is_loopback("127.0.0.1") and origin.is_loopback("::1")
    assert origin.is_loopback("localhost")
    assert not origin.is_loopback("192.168.1.5") and not origin.is_loopback(None)


def test_pacer_allows_one_send_per_gap():
    p = Pacer(0.5)
    assert p.wait(10.0) == 0
    p.sent(10.0)
    assert p.wait(10.2) == pytest.approx(0.3)
    assert p.wait(10.5) == 0


class Host:
    """What the publisher reads and where it sends, as plain values."""

    def __init__(self):
        self.rows = [{"pack": "p", "state": "running", "pid": os.getpid(), "rss_mib": 1.0}]
        self.ledger = []
        self.sent = []
        self.clients = 1

    def publisher(self, **kw):
        return Publisher(
            lambda: self.rows,
            lambda: self.ledger,
            lambda event, data: self.sent.append((event, data)),
            lambda: self.clients,
            **kw,
        )


def test_status_is_sent_on_change_only_and_at_most_once_per_gap():
    host = Host()
    pub = host.publisher()
    assert pub.publish_status(100.0) == 0
    assert [e for e, _ in host.sent] == [STATUS_EVENT] and host.sent[0][1]["seq"] == 1
    # RSS moves on every read: not a change of the status (it travels in the samples).
    host.rows[0]["rss_mib"] = 2.0
    assert pub.publish_status(100.1) == 0 and len(host.sent) == 1
    # A change right after a send waits for the gap; the latest state goes then.
    host.rows[0]["state"] = "idle"
    assert pub.publish_status(100.2) == pytest.approx(MIN_GAP_S - 0.2)
    host.rows[0]["pid"] = None
    assert len(host.sent) == 1
    assert pub.publish_status(100.0 + MIN_GAP_S) == 0
    [_, (_, second)] = host.sent
    assert second["seq"] == 2 and second["packs"][0]["state"] == "idle"
    assert second["packs"][0]["pid"] is None and "rss_mib" not in second["packs"][0]
    snap = pub.snapshot()
    assert snap["seq"] == 2 and snap["packs"] == second["packs"] and snap["history"] == []


def test_history_keeps_the_last_window():
    h = History(window_s=10.0, every_s=2.0)
    for t in range(20):
        h.add({"t": t})
    assert [s["t"] for s in h.samples()] == list(range(14, 20))


def test_a_sample_reads_ram_and_workers_from_proc():
    point = sample({"p": os.getpid()}, list, DeviceReader(Truth()))
    assert point["ram"]["total"] > point["ram"]["used"] > 0
    own = rss(os.getpid())
    assert own and point["ram"]["comfyui"] == pytest.approx(own, rel=0.5)
    assert point["ram"]["workers"]["p"] == pytest.approx(own, rel=0.5)
    assert point["device"] is None  # no CUDA initialised here, no simulated card named
    assert point["models"] is None  # nothing on a device to count
    assert rss(2**22 + 12345) is None


def test_the_device_is_read_device_wide_on_the_simulated_card(tmp_path: Path):
    card = SimGpu.create(tmp_path / "gpu", 8 << 30)
    # The host's device truth when the settings name this card (read once per process).
    reader = DeviceReader(Truth((card,)))
    try:
        card.book(4242, "someone else's model", 3 << 30)  # another process: it counts
        ledger = [
            {"kind": "worker", "device": "cuda:0", "loaded": 5 * MIB},
            {"kind": "host", "device": "cuda:0", "loaded": 7 * MIB},
            {"kind": "host", "device": "cpu", "loaded": 11 * MIB},
        ]
        point = sample({}, lambda: ledger, reader)
        assert point["device"] == {"uuid": card.uuid, "total": 8 << 30, "used": 3 << 30}
        assert point["models"] == {"host": 7 * MIB, "workers": 5 * MIB}
    finally:
        card.release_process(4242)


def test_memory_samples_are_kept_without_clients_and_sent_with_them():
    host = Host()
    host.clients = 0
    pub = host.publisher(history=History(window_s=60.0, every_s=2.0))
    pub.take_sample()
    assert host.sent == [] and len(pub.history.samples()) == 1
    host.clients = 1
    pub.snapshot()  # a status read: the worker's pid, for the samples
    pub.take_sample()
    assert [e for e, _ in host.sent] == [MEMORY_EVENT]
    first, second = pub.history.samples()
    assert first["ram"]["workers"] == {}  # no status read yet: no pid known
    assert second["ram"]["workers"]["p"] > 0 and host.sent[0][1] == second
    assert len(pub.snapshot()["history"]) == 2


def test_routes_refuse_cross_origin_actions_on_a_real_server():
    """Our own check, with no upstream middleware in front of it (as under ComfyUI's
    --enable-cors-header): the action never runs."""
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from comfy_airlock.host.panel import routes

    async def scenario():
        table = web.RouteTableDef()
        host = Host()
        routes.add_routes(table, host.publisher())
        app = web.Application()
        app.add_routes(table)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            port = client.server.port
            evil = await client.post(
                "/airlock/workers/p/restart",
                headers={"Host": f"127.0.0.1:{port}", "Origin": "http://evil.example"},
            )
            cross = await client.post(
                "/airlock/workers/p/release", headers={"Sec-Fetch-Site": "cross-site"}
            )
            same = await client.post(
                "/airlock/workers/p/restart",
                headers={"Host": f"127.0.0.1:{port}", "Origin": f"http://127.0.0.1:{port}"},
            )
            snap = await client.get("/airlock/panel")
            return (
                (evil.status, await evil.json()),
                (cross.status, await cross.json()),
                (same.status, await same.json()),
                (snap.status, await snap.json()),
            )

    evil, cross, same, snap = asyncio.run(scenario())
    assert evil[0] == 403 and "evil.example" in evil[1]["error"]
    assert cross[0] == 403 and "cross-site" in cross[1]["error"]
    # Allowed through, and then: no such pack is loaded in this process.
    assert same[0] == 404 and "'p'" in same[1]["error"] and "not loaded" in same[1]["error"]
    assert snap[0] == 200 and snap[1]["packs"][0]["pack"] == "p"
    assert snap[1]["events"] == {"status": STATUS_EVENT, "memory": MEMORY_EVENT}


def test_memory_keeps_its_pace_while_the_status_waits_on_a_starting_worker():
    """Reading a worker's row waits while that worker is being started (its slot is held for
    the spawn); the memory samples read no worker and go on."""
    import threading
    import time

    host = Host()
    spawning = threading.Event()
    reads = []

    def read_packs():
        reads.append(time.monotonic())
        if len(reads) > 1:
            spawning.wait(10)
        return host.rows

    pub = Publisher(
        read_packs,
        lambda: host.ledger,
        lambda event, data: host.sent.append((event, data)),
        lambda: host.clients,
        history=History(window_s=60.0, every_s=0.05),
    )
    pub.start()
    try:
        deadline = time.monotonic() + 10
        while len(reads) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        blocked = len(pub.history.samples())
        time.sleep(0.5)
        assert len(reads) == 2  # the status thread is stuck in its read
        assert len(pub.history.samples()) >= blocked + 4
        assert pub.history.samples()[-1]["ram"]["workers"]["p"] > 0  # the pid seen before
    finally:
        spawning.set()
        pub.stop()

"""comfy-airlock's sidebar panel in ComfyUI's own frontend, in a real (headless) Chromium, against
the real ComfyUI server: the tab lists the isolated packs (and why one is not loaded), their
workers, the models they hold, ComfyUI's ledger and memory history read once, then follows the
host over ComfyUI's websocket without polling; its actions restart a worker and release its
models; an error shows the worker's traceback; a cross-origin POST is refused as ComfyUI
refuses one.

One ComfyUI server and one browser page serve the whole module (the tests run in order and
build on each other's state). Chromium is the system's (``/usr/bin/chromium``, installed by
scripts/bootstrap.sh); Playwright only drives it. ``PANEL_SCREENSHOT=path`` also writes the
screenshot there (docs/panel.png is made that way).
"""

from __future__ import annotations

import os
import shutil
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import ROOT, missing

from comfy_airlock.host.panel import origin

from .harness import ComfyUI, make_base_dir

AIRLOCK_HOME = Path(os.environ.get("AIRLOCK_TEST_HOME") or ROOT / ".cache" / "test-airlock-home")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
TEST_PACKS = ROOT / "tests" / "packs"
MIB = 1 << 20
OTHER_PID = 4_000_000  # no such process: a booking of "someone else" on the simulated card


def legacy_prompt(seed: int) -> dict:
    return {
        "1": {
            "class_type": "LegacyNoiseImage",
            "inputs": {"width": 16, "height": 16, "seed": seed},
        },
        "2": {"class_type": "PreviewImage", "inputs": {"images": ["1", 0]}},
    }


def hold_prompt(name: str, mib: int) -> dict:
    """memory-pack's node: a model of ``mib`` MiB held by its worker (on the CPU: ComfyUI runs
    with --cpu here), in ComfyUI's ledger through its stand-in."""
    return {
        "m": {
            "class_type": "MemoryPackNode",
            "inputs": {"name": name, "mib": mib, "device": "cpu"},
        },
        "p": {"class_type": "PreviewAny", "inputs": {"source": ["m", 0]}},
    }


def row(ui: ComfyUI, pack: str) -> dict:
    [r] = [r for r in ui.get("/airlock/workers") if r["pack"] == pack]
    return r


@pytest.fixture(scope="module")
def card(tmp_path_factory):
    """The simulated card ComfyUI's NVML reads here (the fake NVML): its device chart. Its
    models stay on the CPU (ComfyUI runs with --cpu); another process books 2 GiB on it."""
    from comfy_airlock.device import SimGpu

    gpu = SimGpu.create(tmp_path_factory.mktemp("gpu") / "card", 16 << 30)
    gpu.book(OTHER_PID, "another process's model", 2 << 30)
    yield gpu
    gpu.release_process(OTHER_PID)


@pytest.fixture(scope="module")
def ui(comfyui_dir, tmp_path_factory, card, fake_nvml):
    if CHROMIUM is None:
        missing("chromium is missing: scripts/bootstrap.sh installs it")
    base = make_base_dir(
        tmp_path_factory.mktemp("panel"),
        custom_nodes={
            "comfy-airlock": ROOT / "custom_node",
            "misplaced-pack": TEST_PACKS / "misplaced-pack",
        },
        isolated={
            "legacy-numpy": ROOT / "examples" / "packs" / "legacy-numpy",
            "memory-pack": TEST_PACKS / "memory-pack",
            "regional-group": TEST_PACKS / "regional-group",
        },
    )
    ui = ComfyUI(
        comfyui_dir,
        base,
        env={
            "AIRLOCK_HOME": str(AIRLOCK_HOME),
            "AIRLOCK_SIM_GPU": card.path,
            "AIRLOCK_NVML_LIBRARY": str(fake_nvml),
        },
        startup_timeout=900,
        start=False,
    )
    try:
        ui.start()
        # A first visit would open the templates dialog over the page (the frontend's rule).
        ui.post("/settings/Comfy.TutorialCompleted", True)
        ui.run(hold_prompt("held", 4), timeout=300)
        ui.run(legacy_prompt(1), timeout=300)
        yield ui
    finally:
        ui.stop()


class Browser:
    """The page with the panel open, and every request it made to comfy-airlock's routes."""

    def __init__(self, page, opened_at: float):
        self.page = page
        self.opened_at = opened_at
        self.requests: list[tuple[str, str]] = []
        page.on("request", self._seen)

    def _seen(self, request) -> None:
        if "/airlock/" in request.url:
            path = request.url.split("/airlock/", 1)[1]
            # Not the panel's: the list of isolated packs' extensions, read once as the page
            # loads its extensions (web/isolated_extensions.js, ADR 0021).
            if path != "extensions":
                self.requests.append((request.method, path))

    def cell(self, pack: str, key: str):
        """A figure of a pack's card (state, pid, generation, ...)."""
        return self.page.locator(f'.comfy-airlock-panel div[data-pack="{pack}"] [data-key="{key}"]')

    def text(self, pack: str, key: str) -> str:
        return self.cell(pack, key).inner_text()

    def model(self, ref: str, key: str):
        """A figure of a model a worker holds (``ref``: ``pack/name``)."""
        return self.page.locator(f'.comfy-airlock-panel [data-model="{ref}"] [data-key="{key}"]')

    def button(self, action: str, pack: str):
        return self.page.locator(
            f'.comfy-airlock-panel button[data-action="{action}"][data-pack="{pack}"]'
        )

    def result(self):
        return self.page.locator('.comfy-airlock-panel [data-key="action-result"]')

    def events(self) -> int:
        return self.page.evaluate("() => window.comfyAirlockPanel.events")


def open_panel(page) -> None:
    """Clicks the panel's sidebar button, closing any dialog the frontend opens meanwhile."""
    button = page.locator(".comfy-airlock-tab-button").first
    for _ in range(20):
        if page.locator('[data-testid="dialog-overlay"]').count():
            page.keyboard.press("Escape")
        try:
            button.click(timeout=3_000)
            return
        except Exception:  # a dialog intercepted the click
            time.sleep(0.5)
    raise AssertionError("the comfy-airlock sidebar button cannot be clicked")


@pytest.fixture(scope="module")
def browser(ui):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright is missing from .venv (requirements/dev.txt)")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = chromium.new_page(viewport={"width": 1500, "height": 1000})
            b = Browser(page, time.time())
            page.goto(ui.url)
            page.wait_for_function(
                "() => window.app?.extensionManager?.sidebarTab?.sidebarTabs?.some("
                "t => t.id === 'comfy-airlock')",
                timeout=120_000,
            )
            open_panel(page)
            page.locator('.comfy-airlock-panel div[data-pack="memory-pack"]').wait_for(
                timeout=60_000
            )
            yield b
        finally:
            chromium.close()


def expect(locator):
    from playwright.sync_api import expect as pw_expect

    return pw_expect(locator)


def test_the_tab_shows_packs_workers_models_ledger_and_history(ui, browser):
    mem = row(ui, "memory-pack")
    expect(browser.cell("memory-pack", "pid")).to_have_text(str(mem["pid"]), timeout=30_000)
    assert browser.text("memory-pack", "state") == "running"
    assert browser.text("memory-pack", "generation") == str(mem["generation"])
    assert browser.text("memory-pack", "calls") == str(mem["calls"])
    assert browser.text("memory-pack", "torch") == mem["torch"]
    assert browser.text("legacy-numpy", "python").startswith("3.10.")
    assert browser.text("legacy-numpy", "numpy").startswith("1.26.")
    assert browser.text("legacy-numpy", "torch") == "-"  # its env has none
    # A group: one card, one worker, its packs named (ADR 0054).
    members = "packs: regional-core, regional-broken, regional-extras, regional-web"
    assert browser.text("regional-group", "members") == members
    expect(browser.cell("memory-pack", "rss")).to_contain_text("MiB", timeout=10_000)
    # Why a pack is not loaded; it has nothing to restart.
    assert browser.text("misplaced-pack", "state") == "failed (placement)"
    why = browser.page.locator('.comfy-airlock-panel [data-error-pack="misplaced-pack"]')
    assert "sits in custom_nodes/" in why.inner_text()
    failed = browser.page.locator('.comfy-airlock-panel div[data-pack="misplaced-pack"] button')
    assert failed.count() == 0
    # The model its worker holds, and ComfyUI's own entry for it.
    assert browser.model("memory-pack/held", "resident").inner_text() == "4.0 MiB"
    assert browser.model("memory-pack/held", "device").inner_text() == "cpu"
    assert browser.model("memory-pack/held", "in_ledger").inner_text() == "in ComfyUI's list"
    ledger = browser.page.locator('.comfy-airlock-panel [data-ledger-kind="worker"]')
    assert "held" in ledger.first.locator('[data-key="name"]').inner_text()
    assert ledger.first.locator('[data-key="loaded"]').inner_text() == "4.0 MiB"
    # Memory history from before the page was opened (kept host-side), drawn as lines.
    first_t = browser.page.evaluate("() => window.comfyAirlockPanel.history[0].t")
    assert first_t < browser.opened_at - 4, (first_t, browser.opened_at)
    line = browser.page.locator(
        '.comfy-airlock-panel [data-chart="ram"] path[data-series="comfyui"]'
    )
    assert int(line.get_attribute("data-points")) >= 3
    # The card, device-wide: what another process holds counts.
    device = browser.page.locator('.comfy-airlock-panel [data-chart="device"]')
    assert device.locator("figcaption").inner_text() == "Device (of 16.0 GiB)"
    assert device.locator('[data-legend="used"]').inner_text().endswith("used 2.0 GiB")
    assert int(device.locator('path[data-series="used"]').get_attribute("data-points")) >= 3
    # One read of the whole state; nothing else asked.
    assert browser.requests == [("GET", "panel")], browser.requests


def test_it_follows_the_host_over_the_websocket_without_polling(ui, browser):
    before = row(ui, "legacy-numpy")
    events = browser.events()
    os.kill(before["pid"], signal.SIGKILL)  # from outside: the panel must hear of it
    expect(browser.cell("legacy-numpy", "state")).to_have_text("idle", timeout=30_000)
    ui.run(legacy_prompt(2), timeout=300)
    after = row(ui, "legacy-numpy")
    assert after["pid"] != before["pid"] and after["generation"] > before["generation"]
    expect(browser.cell("legacy-numpy", "pid")).to_have_text(str(after["pid"]), timeout=30_000)
    expect(browser.cell("legacy-numpy", "generation")).to_have_text(str(after["generation"]))
    assert browser.text("legacy-numpy", "calls") == str(after["calls"])
    assert browser.events() > events
    assert browser.requests == [("GET", "panel")], browser.requests


def test_an_error_shows_the_workers_traceback(ui, browser, tmp_path):
    oom = {
        "o": {"class_type": "MemoryPackOOM", "inputs": {"name": "oom-held", "mib": 2}},
        "p": {"class_type": "PreviewAny", "inputs": {"source": ["o", 0]}},
    }
    ui.run(oom, timeout=300, check=False)
    mem = row(ui, "memory-pack")
    assert mem["errors"] >= 1 and "OutOfMemoryError" in mem["last_error"]
    expect(browser.cell("memory-pack", "errors")).to_have_text(str(mem["errors"]), timeout=30_000)
    block = browser.page.locator('.comfy-airlock-panel [data-error-pack="memory-pack"]')
    expect(block).to_contain_text("OutOfMemoryError: simulated: no room for oom-held")
    trace = browser.page.locator('.comfy-airlock-panel pre[data-traceback="memory-pack"]')
    text = trace.inner_text()
    assert "Traceback" in text and "memory-pack" in text and "in run" in text
    assert "raise torch.cuda.OutOfMemoryError" in text
    # A model held again, for the picture: workers, a model, the ledger, memory, the error.
    ui.run(hold_prompt("upscaler", 6), timeout=300)
    expect(browser.model("memory-pack/upscaler", "resident")).to_have_text(
        "6.0 MiB", timeout=30_000
    )
    # The browser holds the history the host kept (the snapshot, then the events).
    seen = browser.page.evaluate("() => window.comfyAirlockPanel.history.map(s => s.t)")
    kept = [s["t"] for s in ui.get("/airlock/panel")["history"]]
    assert abs(seen[0] - kept[0]) < 5 and len(seen) >= len(kept) - 3, (seen, kept)
    shot = tmp_path / "panel.png"
    browser.page.locator(".comfy-airlock-panel").screenshot(path=str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("PANEL_SCREENSHOT"):
        shutil.copyfile(shot, os.environ["PANEL_SCREENSHOT"])


def test_release_empties_the_workers_models(ui, browser):
    browser.button("release", "memory-pack").click()
    expect(browser.result()).to_have_text("memory-pack: released upscaler", timeout=60_000)
    expect(browser.model("memory-pack/upscaler", "resident")).to_have_text("0 B", timeout=10_000)
    models = row(ui, "memory-pack")["models"]
    assert models and all(m["resident"] == 0 for m in models), models
    for m in models:
        assert browser.model(f"memory-pack/{m['name']}", "resident").inner_text() == "0 B"
    assert ("POST", "workers/memory-pack/release") in browser.requests


def test_restart_raises_the_generation(ui, browser):
    ui.run(hold_prompt("upscaler", 7), timeout=300)  # the same model, loaded back: 6 MiB
    expect(browser.model("memory-pack/upscaler", "resident")).to_have_text(
        "6.0 MiB", timeout=30_000
    )
    before = row(ui, "memory-pack")
    browser.button("restart", "memory-pack").click()
    gen = before["generation"] + 1
    expect(browser.result()).to_have_text(
        f"memory-pack: worker restarted, generation {gen}", timeout=120_000
    )
    after = row(ui, "memory-pack")
    assert after["generation"] == gen and after["state"] == "running"
    assert after["pid"] != before["pid"]
    expect(browser.cell("memory-pack", "generation")).to_have_text(str(gen), timeout=10_000)
    expect(browser.cell("memory-pack", "pid")).to_have_text(str(after["pid"]), timeout=10_000)
    # The old generation's model went with its process.
    [old] = [m for m in after["models"] if m["name"] == "upscaler"]
    assert old["generation"] == gen - 1 and old["resident"] == 0
    expect(browser.model("memory-pack/upscaler", "resident")).to_have_text("0 B", timeout=10_000)
    assert browser.requests.count(("GET", "panel")) == 1, browser.requests


def _post(ui: ComfyUI, path: str, headers: dict) -> int:
    req = urllib.request.Request(ui.url + path, data=b"", method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _get(ui: ComfyUI, path: str, headers: dict) -> int:
    req = urllib.request.Request(ui.url + path, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_cross_origin_actions_are_refused_as_comfyuis_own_routes_refuse_them(ui):
    host = f"127.0.0.1:{ui.port}"
    cases = [
        {"Origin": "http://evil.example"},
        {"Origin": f"http://evil.example:{ui.port}"},
        {"Origin": "http://127.0.0.1:1"},
        {"Origin": f"http://127.0.0.1:{ui.port}"},
        {"Origin": "http://127.0.0.1"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-origin"},
        {"Host": f"localhost:{ui.port}", "Origin": f"http://localhost:{ui.port}"},
        {"Host": f"localhost:{ui.port}", "Origin": "http://127.0.0.1:1"},
    ]
    for case in cases:
        headers = {"Host": host, **case}
        # Upstream's own verdict: its middleware in front of a route that checks nothing.
        upstream = _get(ui, "/airlock/workers", headers)
        ours = origin.refusal(headers)
        assert (upstream == 403) == (ours is not None), (case, upstream, ours)
    before = row(ui, "memory-pack")
    for case in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        for action in ("restart", "release"):
            status = _post(ui, f"/api/airlock/workers/memory-pack/{action}", {"Host": host, **case})
            assert status == 403, (case, action, status)
    after = row(ui, "memory-pack")
    assert (after["pid"], after["generation"]) == (before["pid"], before["generation"])
    assert [m["resident"] for m in after["models"]] == [m["resident"] for m in before["models"]]

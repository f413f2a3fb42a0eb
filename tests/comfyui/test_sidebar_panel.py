"""comfy-airlock's sidebar panel in ComfyUI's own frontend, in a real (headless) Chromium: it
lists the isolated packs from ``/airlock/workers`` and follows their workers live (a worker
killed from outside shows up as a new generation with a new pid, without reloading the page).

Chromium is the system's (``/usr/bin/chromium``, installed by scripts/bootstrap.sh); Playwright
only drives it.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

from conftest import ROOT, missing

from .harness import ComfyUI, make_base_dir

AIRLOCK_HOME = Path(os.environ.get("AIRLOCK_TEST_HOME") or ROOT / ".cache" / "test-airlock-home")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PACK = "legacy-numpy"


def prompt(seed: int) -> dict:
    return {
        "1": {
            "class_type": "LegacyNoiseImage",
            "inputs": {"width": 16, "height": 16, "seed": seed},
        },
        "2": {"class_type": "PreviewImage", "inputs": {"images": ["1", 0]}},
    }


def row_text(page, key: str) -> str:
    return page.locator(
        f'.comfy-airlock-panel tr[data-pack="{PACK}"] td[data-key="{key}"]'
    ).inner_text()


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


def wait_for(page, key: str, want: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = row_text(page, key)
        if last == want:
            return
        time.sleep(0.25)
    raise AssertionError(f"panel {key} of {PACK} is {last!r}, not {want!r}")


def test_sidebar_panel_lists_packs_and_follows_workers_live(comfyui_dir, tmp_path):
    if CHROMIUM is None:
        missing("chromium is missing: scripts/bootstrap.sh installs it")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright is missing from .venv (requirements/dev.txt)")
    base = make_base_dir(
        tmp_path,
        custom_nodes={"comfy-airlock": ROOT / "custom_node"},
        isolated={PACK: ROOT / "examples" / "packs" / PACK},
    )
    env = {"AIRLOCK_HOME": str(AIRLOCK_HOME)}
    ui = ComfyUI(comfyui_dir, base, env=env, startup_timeout=900, start=False)
    try:
        ui.start()
        # A first visit would open the templates dialog over the page (the frontend's rule).
        ui.post("/settings/Comfy.TutorialCompleted", True)
        ui.run(prompt(1), timeout=300)  # the pack's worker is up
        [row] = [r for r in ui.get("/airlock/workers") if r["pack"] == PACK]
        assert row["state"] == "running", row
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                page = browser.new_page()
                page.goto(ui.url)
                page.wait_for_function(
                    "() => window.app?.extensionManager?.sidebarTab?.sidebarTabs?.some("
                    "t => t.id === 'comfy-airlock')",
                    timeout=120_000,
                )
                open_panel(page)
                page.locator(f'.comfy-airlock-panel tr[data-pack="{PACK}"]').wait_for(
                    timeout=30_000
                )
                wait_for(page, "pid", str(row["pid"]))
                assert row_text(page, "state") == "running"
                assert row_text(page, "python").startswith("3.10.")
                assert row_text(page, "numpy").startswith("1.26.")

                os.kill(row["pid"], signal.SIGKILL)  # from outside: the panel must notice
                wait_for(page, "state", "idle")
                ui.run(prompt(2), timeout=300)
                [after] = [r for r in ui.get("/airlock/workers") if r["pack"] == PACK]
                assert after["pid"] != row["pid"] and after["generation"] > row["generation"]
                wait_for(page, "pid", str(after["pid"]))
                wait_for(page, "generation", str(after["generation"]))
            finally:
                browser.close()
    finally:
        ui.stop()

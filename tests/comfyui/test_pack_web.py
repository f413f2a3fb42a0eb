"""The frontend files of an isolated pack against the same pack loaded natively, in one real
ComfyUI 0.30.0 and its own frontend, driven in a real (headless) Chromium (ADR 0021).

The server holds two copies of tests/packs/web-pack: ``custom_nodes/web-native`` and
``isolated_nodes/web-iso``. Each names its node, its extension and what it records in the page
after its folder (and its ``pyproject.toml`` project after the folder too, set here), so the
two must behave the same with the names swapped: the same files at the same URLs, the same
listing, and in the browser the same extension hooks, widgets, sibling module, stylesheet and
text display of the node's UI output after a prompt the page queues itself.

Chromium is the system's (``/usr/bin/chromium``, installed by scripts/bootstrap.sh); Playwright
only drives it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import missing

from .harness import ComfyUI, make_base_dir

REPO = Path(__file__).resolve().parents[2]
PACK = REPO / "tests" / "packs" / "web-pack"
AIRLOCK_HOME = Path(os.environ.get("AIRLOCK_TEST_HOME") or REPO / ".cache" / "test-airlock-home")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NATIVE, ISO = "web-native", "web-iso"


def _project(folder: str) -> str:
    return f"{folder}-project"


@pytest.fixture(scope="module")
def server(comfyui_dir, tmp_path_factory):
    # Copies, not links: each copy names itself after its folder.
    base = make_base_dir(
        tmp_path_factory.mktemp("web"),
        custom_nodes={"comfy-airlock": REPO / "custom_node", NATIVE: PACK},
        isolated={ISO: PACK},
        copy=True,
    )
    (base / "custom_nodes" / NATIVE / "airlock.toml").unlink()  # a native pack has none
    for sub, folder in (("custom_nodes", NATIVE), ("isolated_nodes", ISO)):
        pyproject = base / sub / folder / "pyproject.toml"
        text = pyproject.read_text().replace('"comfyui-web-pack"', f'"{_project(folder)}"')
        pyproject.write_text(text)
    env = {"AIRLOCK_HOME": str(AIRLOCK_HOME)}
    ui = ComfyUI(comfyui_dir, base, env=env, startup_timeout=1200, start=False)
    ui.start()
    yield ui
    ui.stop()


def fetch(ui: ComfyUI, path: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(ui.url + path, timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _ours(paths: list[str], name: str) -> list[str]:
    """The paths under /extensions/<name>/, relative to it, sorted."""
    prefix = f"/extensions/{name}/"
    return sorted(p.removeprefix(prefix) for p in paths if p.startswith(prefix))


def test_files_and_listing_are_served_as_natively(server):
    native_list = server.get("/api/extensions")
    isolated_list = server.get("/api/airlock/extensions")
    assert "/extensions/comfy-airlock/isolated_extensions.js" in native_list
    pairs = [(NATIVE, ISO), (_project(NATIVE), _project(ISO))]
    pairs.append((f"{NATIVE}-injected", f"{ISO}-injected"))  # nodes.EXTENSION_WEB_DIRS[...] = ...
    for native_name, iso_name in pairs:
        want = _ours(native_list, native_name)
        assert want, f"ComfyUI lists no .js of {native_name}: {native_list}"
        assert _ours(isolated_list, iso_name) == want
        assert not _ours(native_list, iso_name)  # ComfyUI's own list is not written
    assert _ours(native_list, NATIVE) == ["js/lib/util.js", "js/show_text.js"]

    paths = [
        "js/show_text.js",
        "js/lib/util.js",
        "css/web_pack.css",
        "js/missing.js",
        "js/../../__init__.py",
        "js/%2e%2e/%2e%2e/nodes.py",
        "",
    ]
    for rel in paths:
        a = fetch(server, f"/extensions/{NATIVE}/{rel}")
        b = fetch(server, f"/extensions/{ISO}/{rel}")
        assert a[0] == b[0], (rel, a[0], b[0])
        assert a[2] == b[2], rel
        for header in ("Content-Type", "Accept-Ranges", "Content-Length"):
            assert a[1].get(header) == b[1].get(header), (rel, header)
    assert fetch(server, f"/extensions/{ISO}/js/show_text.js")[0] == 200
    # Static folders get no /api twin, natively or isolated.
    assert fetch(server, f"/api/extensions/{NATIVE}/js/show_text.js")[0] == 404
    assert fetch(server, f"/api/extensions/{ISO}/js/show_text.js")[0] == 404
    a = fetch(server, f"/extensions/{NATIVE}-injected/injected.js")
    b = fetch(server, f"/extensions/{ISO}-injected/injected.js")
    assert a[0] == b[0] == 200 and a[2] == b[2]
    a = fetch(server, f"/extensions/{_project(NATIVE)}/extension.js")
    b = fetch(server, f"/extensions/{_project(ISO)}/extension.js")
    assert a[0] == b[0] == 200 and a[2] == b[2]


def test_example_workflows_are_served_as_natively(server):
    # ComfyUI serves a loaded pack's example_workflows/ at /api/workflow_templates/<folder>
    # (the frontend's template browser); an isolated pack's is served there too.
    for rel in ("show_text.json", "missing.json", "../nodes.py"):
        a = fetch(server, f"/api/workflow_templates/{NATIVE}/{rel}")
        b = fetch(server, f"/api/workflow_templates/{ISO}/{rel}")
        assert a[0] == b[0] and a[2] == b[2], (rel, a[0], b[0])
        assert a[1].get("Content-Type") == b[1].get("Content-Type"), rel
    assert fetch(server, f"/api/workflow_templates/{ISO}/show_text.json")[0] == 200


def _page_state(page) -> dict:
    return page.evaluate(
        """() => ({
            packs: window.__webPack || {},
            projects: window.__webPackProjects || [],
            extensions: (window.app?.extensions || []).map((e) => e.name),
        })"""
    )


def test_extension_runs_and_shows_the_node_output_as_natively(server):
    if CHROMIUM is None:
        missing("chromium is missing: scripts/bootstrap.sh installs it")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright is missing from .venv (requirements/dev.txt)")
    # A first visit would open the templates dialog over the page (the frontend's rule).
    server.post("/settings/Comfy.TutorialCompleted", True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(server.url)
            page.wait_for_function(
                f"() => window.__webPack?.['{NATIVE}']?.setup && window.__webPack?.['{ISO}']?.setup"
                " && (window.__webPackProjects || []).length >= 2",
                timeout=180_000,
            )
            page.wait_for_function(
                f"() => window.__webPack['{NATIVE}'].css !== null"
                f" && window.__webPack['{ISO}'].css !== null",
                timeout=30_000,
            )
            state = _page_state(page)
            for folder in (NATIVE, ISO):
                seen = state["packs"][folder]
                assert seen["defs"] == [f"{folder}.ShowText"], (folder, seen)
                assert seen["css"] is True, (folder, seen)
                assert f"webpack.{folder}" in state["extensions"], state["extensions"]
                assert _project(folder) in state["projects"], state["projects"]
                assert f"webpack-project.{_project(folder)}" in state["extensions"]
            assert not [e for e in errors if "Error loading extension" in e], errors

            shown = _run_in_page(page)
            for folder in (NATIVE, ISO):
                text = f"hello {folder}"
                want = f"» {folder} says {text!r} ({len(text)} chars)"
                assert shown[folder]["widgets"][:2] == ["text", "web-pack button"], shown
                assert shown[folder]["created"] == 1, shown
                assert shown[folder]["shown"] == want, shown
        finally:
            browser.close()


def _run_in_page(page, timeout: float = 300.0) -> dict:
    """Adds one node of each copy to an empty graph, queues it from the page, and waits until
    both nodes show their output; returns what each node shows and its widgets."""
    folders = json.dumps([NATIVE, ISO])
    page.evaluate(
        f"""async () => {{
            const app = window.app;
            app.graph.clear();
            let x = 50;
            for (const folder of {folders}) {{
                const node = window.LiteGraph.createNode(`${{folder}}.ShowText`);
                node.pos = [x, 100];
                x += 400;
                app.graph.add(node);
                node.widgets.find((w) => w.name === "text").value = `hello ${{folder}}`;
            }}
            await app.queuePrompt(0, 1);
        }}"""
    )
    deadline = time.monotonic() + timeout
    while True:
        shown = page.evaluate(
            f"""() => Object.fromEntries({folders}.map((folder) => {{
                const node = window.app.graph.nodes.find((n) => n.type === `${{folder}}.ShowText`);
                return [folder, {{
                    widgets: node.widgets.map((w) => w.name),
                    shown: node.widgets.find((w) => w.name === "shown")?.value ?? null,
                    created: window.__webPack[folder].created,
                }}];
            }}))"""
        )
        if all(s["shown"] is not None for s in shown.values()):
            return shown
        if time.monotonic() > deadline:
            raise AssertionError(f"no node output shown after {timeout:.0f} s: {shown}")
        time.sleep(0.5)

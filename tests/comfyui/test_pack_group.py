"""A group of packs that call each other's code, isolated together in the real ComfyUI
(ADR 0054): tests/packs/regional-group, members in the shape of ComfyUI-Impact-Pack (a class
of its own passed between nodes, a node class with a static method) and ComfyUI-Inspire-Pack
(it looks the other's class up in ``nodes.NODE_CLASS_MAPPINGS`` and calls that method), and a
member whose import fails, and one of JavaScript alone. One worker, one environment; each
member is a pack to ComfyUI."""

from __future__ import annotations

import os
from pathlib import Path

from .harness import make_base_dir

REPO = Path(__file__).resolve().parents[2]
GROUP = REPO / "tests" / "packs" / "regional-group"
AIRLOCK_HOME = Path(os.environ.get("AIRLOCK_TEST_HOME") or REPO / ".cache" / "test-airlock-home")


def _text(entry: dict, node: str) -> list[str]:
    return entry["outputs"][node]["text"]


def test_a_group_runs_its_packs_in_one_worker(start_comfyui, tmp_path):
    base = make_base_dir(
        tmp_path,
        custom_nodes={"comfy-airlock": REPO / "custom_node"},
        isolated={"regional-group": GROUP},
    )
    ui = start_comfyui(base, env={"AIRLOCK_HOME": str(AIRLOCK_HOME)}, startup_timeout=1200)
    log = ui.log_text()
    # The failing member is named with its cause; the other two load without it.
    assert "pack 'regional-broken' of group 'regional-group' failed to import" in log, log[-3000:]
    assert "No module named 'regional_broken_missing_module'" in log
    # What to do, in the group's own config (the host's Python lacks the module too).
    want = "add the package that provides regional_broken_missing_module to `dependencies` in "
    assert want + str(base / "isolated_nodes" / "regional-group" / "airlock.toml") in log
    assert "pack 'regional-group': 4 node(s) isolated" in log, log[-3000:]

    # Each member is its own pack to the frontend, as in custom_nodes/.
    info = ui.object_info()
    modules = {n: info[n]["python_module"] for n in info if n.startswith("Regional")}
    assert modules == {
        "RegionalCoreRegions": "custom_nodes.regional-core",
        "RegionalCoreSampler": "custom_nodes.regional-core",
        "RegionalExtrasSample": "custom_nodes.regional-extras",
        # Defined by both: the later pack's, as natively.
        "RegionalShared": "custom_nodes.regional-extras",
    }

    # One member's object, into the other member's node, which calls the first member's class.
    prompt = {
        "1": {
            "class_type": "EmptyImage",
            "inputs": {"width": 16, "height": 8, "batch_size": 1, "color": 0},
        },
        "2": {
            "class_type": "RegionalCoreRegions",
            "inputs": {"image": ["1", 0], "strength": 0.125, "count": 2},
        },
        "3": {
            "class_type": "RegionalExtrasSample",
            "inputs": {"image": ["1", 0], "regional_prompts": ["2", 0]},
        },
        "4": {
            "class_type": "RegionalCoreSampler",
            "inputs": {"image": ["3", 0], "regional_prompts": ["2", 0]},
        },
        "5": {"class_type": "PreviewImage", "inputs": {"images": ["4", 0]}},
    }
    entry = ui.run(prompt)
    (text,) = _text(entry, "3")
    assert text.startswith("prestartup: ran; core at import: True; regions: 2 "), text
    assert "RegionalPrompt" in text and text.endswith("shared: regional-extras; mean: 0.5000")

    # Each member's web folder and example workflows where ComfyUI serves a native pack's.
    listed = ui.get("/api/airlock/extensions")
    js = ("regional-core/core.js", "regional-extras/extras.js", "regional-web/only.js")
    for url in [f"/extensions/{path}" for path in js]:
        assert url in listed, listed
        assert b"export const" in ui.get(url, raw=True)
    assert ui.get("/api/workflow_templates/regional-extras/regional.json")["version"] == 0.4

"""``comfy-nodes = false`` in a pack's airlock.toml (ADR 0060): its worker does not import
ComfyUI's own nodes before the pack, and the pack still uses ComfyUI as it likes: real workers,
the real ComfyUI 0.30.0 (comfy_nodes_scenario.py, one fresh process)."""

from __future__ import annotations

import pytest

from .scenario_run import run_scenario

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def result(comfyui_dir):
    return run_scenario("comfy_nodes_scenario.py", [], comfyui_dir, timeout=600)


def test_the_default_worker_imports_comfyuis_nodes_before_the_pack(result):
    at = result["default"]["at_import"]
    assert at == {"nodes": True, "comfy_extras.nodes_latent": True, "comfy.samplers": True}
    uses = result["default"]["uses_comfy"]
    assert uses == {"device": "cpu", "vae_decode": True, "own_node": True, "extras": True}


def test_with_comfy_nodes_false_the_pack_imports_what_it_uses_itself(result):
    # Nothing of ComfyUI's nodes when the pack's import began.
    assert result["off"]["at_import"] == {
        "nodes": False,
        "comfy_extras.nodes_latent": False,
        "comfy.samplers": False,
    }
    # A node then imports ComfyUI's model management and `nodes` itself: they work, the pack's
    # node is in ComfyUI's mappings as natively, and the builtin extra nodes were never loaded.
    uses = result["off"]["uses_comfy"]
    assert uses == {"device": "cpu", "vae_decode": True, "own_node": True, "extras": False}

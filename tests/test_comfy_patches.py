"""Which of ComfyUI's functions a pack's import replaced (ADR 0053), read alone on a stand-in
ComfyUI tree: the real one is tests/comfyui/test_pack_patches.py."""

from __future__ import annotations

import importlib
import sys

from comfy_airlock.worker import comfy_patches


def test_replaced_functions_are_named_and_state_is_not(tmp_path, monkeypatch):
    tree = tmp_path / "ComfyUI"
    (tree / "custom_nodes" / "pack").mkdir(parents=True)
    (tree / "airlock_fake_samplers.py").write_text(
        "FLAG = False\nITEMS = []\n"
        "def sample():\n    return 1\n"
        "class KSampler:\n    def sample(self):\n        return 1\n"
        "    def other(self):\n        return 2\n"
    )
    (tree / "custom_nodes" / "pack" / "airlock_fake_pack_mod.py").write_text("def f():\n    pass\n")
    monkeypatch.syspath_prepend(str(tree))
    monkeypatch.syspath_prepend(str(tree / "custom_nodes" / "pack"))
    samplers = importlib.import_module("airlock_fake_samplers")
    pack_mod = importlib.import_module("airlock_fake_pack_mod")
    try:
        before = comfy_patches.snapshot(str(tree))
        assert "KSampler" in before["airlock_fake_samplers"][1]
        assert "airlock_fake_pack_mod" not in before  # a pack's module, not ComfyUI's
        # What a pack's import does: replace functions, change state, fill lists.
        samplers.KSampler.sample = lambda self: 3
        samplers.sample = lambda: 3
        samplers.FLAG = True
        samplers.ITEMS.append(1)
        samplers.new_helper = lambda: 0
        pack_mod.f = lambda: 0
        assert comfy_patches.replaced(before) == [
            "airlock_fake_samplers.KSampler.sample",
            "airlock_fake_samplers.sample",
        ]
        assert comfy_patches.snapshot(None) == {}
    finally:
        sys.modules.pop("airlock_fake_samplers", None)
        sys.modules.pop("airlock_fake_pack_mod", None)

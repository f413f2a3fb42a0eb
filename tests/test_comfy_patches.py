"""Which of ComfyUI's functions a pack's import replaced (ADR 0053), read alone on a stand-in
ComfyUI tree: the real one is tests/comfyui/test_pack_patches.py."""

from __future__ import annotations

import importlib
import sys
import types

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


def test_what_a_pack_adds_to_comfyuis_choice_lists_is_named(monkeypatch):
    """RES4LYF's shape on a stand-in ``comfy.samplers``: a scheduler appended to
    ``SCHEDULER_NAMES`` (also ``KSampler.SCHEDULERS``) and put in ``SCHEDULER_HANDLERS``, a
    sampler in ``KSampler.SAMPLERS``; one name per kind, in order."""
    samplers = types.ModuleType("comfy.samplers")
    samplers.KSAMPLER_NAMES = ["euler"]
    samplers.SAMPLER_NAMES = [*samplers.KSAMPLER_NAMES, "ddim"]
    samplers.SCHEDULER_HANDLERS = {"normal": object(), "beta": object()}
    samplers.SCHEDULER_NAMES = list(samplers.SCHEDULER_HANDLERS)
    samplers.KSampler = type(
        "KSampler", (), {"SAMPLERS": samplers.SAMPLER_NAMES, "SCHEDULERS": samplers.SCHEDULER_NAMES}
    )
    monkeypatch.setitem(sys.modules, "comfy.samplers", samplers)
    before = comfy_patches.choices()
    assert before == {"samplers": ["euler", "ddim"], "schedulers": ["normal", "beta"]}
    assert comfy_patches.choices_added(before) == {}
    samplers.SCHEDULER_HANDLERS["beta57"] = object()
    samplers.SCHEDULER_NAMES.append("beta57")
    samplers.KSampler.SAMPLERS.insert(1, "res_2m")
    assert comfy_patches.choices_added(before) == {
        "samplers": ["res_2m"],
        "schedulers": ["beta57"],
    }


def test_no_comfyui_here_means_no_choices(monkeypatch):
    monkeypatch.delitem(sys.modules, "comfy.samplers", raising=False)
    assert comfy_patches.choices() == {} and comfy_patches.choices_added({}) == {}


def test_a_module_reloaded_by_the_pack_replaces_nothing(tmp_path, monkeypatch):
    """RES4LYF reloads ``comfy.k_diffusion.sampling`` after adding samplers to it: every
    function and class of it is a new object, made by ComfyUI's own code, and none is the
    pack's replacement; one the pack sets before the reload is gone with it, one after it is
    named."""
    tree = tmp_path / "ComfyUI"
    tree.mkdir()
    (tree / "airlock_fake_sampling.py").write_text(
        "def step():\n    return 1\n\nclass Noise:\n    def draw(self):\n        return 1\n"
    )
    monkeypatch.syspath_prepend(str(tree))
    sampling = importlib.import_module("airlock_fake_sampling")
    try:
        before = comfy_patches.snapshot(str(tree))
        sampling.sample_res_2m = lambda: 0  # an addition, as RES4LYF's samplers
        sampling = importlib.reload(sampling)
        assert comfy_patches.replaced(before) == []
        sampling.step = lambda: 2  # the pack's own, after the reload
        assert comfy_patches.replaced(before) == ["airlock_fake_sampling.step"]
    finally:
        sys.modules.pop("airlock_fake_sampling", None)

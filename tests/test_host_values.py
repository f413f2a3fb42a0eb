"""ComfyUI's objects inside an isolated node's inputs stay in ComfyUI's process (ADR 0064):
the real proxies and a real worker on this interpreter, with a pack whose nodes pass a
CONDITIONING-shaped value on, read the object inside it, or keep it for a later call. The path
through the real ComfyUI, natively and isolated, is in tests/comfyui/test_native_parity.py."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import airlock_pickle_types as T
import pytest
import torch

from comfy_airlock import host_values
from comfy_airlock.host.pack import IsolatedPack
from comfy_airlock.host.proxies import build_proxy

PACK = """
KEPT = []


class Pass:
    RETURN_TYPES = ("CONDITIONING", "STRING")
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("CONDITIONING",)}}

    def run(self, value):
        import copy

        out = [[t * 2, {**extra, "seen": True}] for t, extra in copy.deepcopy(value)]
        return (out, repr(value[0][1]["control"]))


class Use:
    RETURN_TYPES = ("STRING",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("CONDITIONING",)}}

    def run(self, value):
        return (str(value[0][1]["control"].strength),)


class Keep:
    RETURN_TYPES = ("CONDITIONING",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("CONDITIONING",)}, "optional": {"later": ("BOOLEAN",)}}

    def run(self, value, later=False):
        if not later:
            KEPT.append(value)
        return (KEPT[0],)


NODE_CLASS_MAPPINGS = {"Pass": Pass, "Use": Use, "Keep": Keep}
"""


POINT = "airlock_pickle_types.Point"


class Control:
    """An object of ComfyUI's process with no codec (a ControlNet, a HookGroup)."""

    strength = 0.75


HELPERS = Path(__file__).parent / "helpers"


@pytest.fixture
def nodes(tmp_path):
    d = tmp_path / "cond-pack"
    d.mkdir()
    # The pack finds the module of its pickled type as packs find their vendored code.
    path = f"import sys\nsys.path.insert(0, {str(HELPERS)!r})\n"
    (d / "__init__.py").write_text(path + textwrap.dedent(PACK))
    p = IsolatedPack(
        name="cond-pack",
        dir=str(d),
        python=sys.executable,
        env_dir=sys.prefix,
        env_key="test",
        comfy=False,
        pickle=(POINT,),
    )
    scanned = p.scan()["nodes"]
    yield {name: build_proxy(p, name, scanned[name]) for name in ("Pass", "Use", "Keep")}
    p.close()


def test_an_object_of_comfyui_is_passed_on_and_comes_back_itself(nodes):
    control = Control()
    cond = [[torch.ones(2), {"control": control, "strength": 1.0}]]
    out, seen = nodes["Pass"]().run(value=cond)
    # The node saw a reference (its deep copy kept it), and ComfyUI gets its own object back.
    assert seen == "<Control of ComfyUI's process>"
    assert out[0][1]["control"] is control and out[0][1]["seen"] is True
    assert torch.equal(out[0][0], torch.full((2,), 2.0)) and out[0][1]["strength"] == 1.0
    assert cond[0][1]["control"] is control  # the input itself is not changed
    assert host_values.held_count() == 0  # held for the call only


def test_reading_an_object_of_comfyui_in_a_pack_is_a_clear_error(nodes):
    cond = [[torch.ones(2), {"control": Control()}]]
    with pytest.raises(Exception) as failed:
        nodes["Use"]().run(value=cond)
    text = str(failed.value)
    assert "a Control of ComfyUI's process was used inside an isolated pack" in text, text
    assert "its attribute 'strength' was read" in text, text
    assert host_values.held_count() == 0


def test_an_object_of_comfyui_a_pack_kept_past_its_call_is_a_clear_error(nodes):
    cond = [[torch.ones(2), {"control": Control()}]]
    first = nodes["Keep"]().run(value=cond)[0]
    assert first[0][1]["control"] is cond[0][1]["control"]
    with pytest.raises(host_values.HostValueError, match="not keep it for a later call"):
        nodes["Keep"]().run(value=[[torch.ones(1), {}]], later=True)
    assert host_values.held_count() == 0
    # The worker and its lane are fine after it.
    assert nodes["Pass"]().run(value=cond)[0][0][1]["control"] is cond[0][1]["control"]


def test_a_type_the_pack_lists_in_pickle_is_pickled_not_held(nodes):
    # The pack's airlock.toml lists it in `pickle`: it crosses as a copy, as before.
    point = T.Point(1, 2.5)
    out, seen = nodes["Pass"]().run(value=[[torch.ones(1), {"control": point}]])
    assert seen == "Point(x=1, y=2.5)" and out[0][1]["control"] == point
    assert out[0][1]["control"] is not point  # a copy came back: it was never held

"""The worker's description of one node class tolerates what ComfyUI tolerates (issue 14):
what ComfyUI could not describe either is an OddNode (the scan names it and goes on), the
rest is carried as it is, non-callable methods included. And the host's proxies keep the
pack's python_module when ComfyUI renames them."""

from __future__ import annotations

import pytest

from comfy_airlock.host.proxy import PackModule
from comfy_airlock.node_surface import folder_from_scan, folder_to_scan, python_module
from comfy_airlock.worker.describe import OddNode, describe


class Good:
    CATEGORY = "t"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "go"
    IS_CHANGED = True  # a bool: ComfyUI calls it, warns and re-runs the node

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"x": ("INT", {"default": 1})}}

    @classmethod
    def VALIDATE_INPUTS(cls, x, input_types=None):
        return True


def test_a_bool_is_changed_is_carried_as_its_value():
    meta = describe("Good", Good, v3=False)
    assert meta["constants"] == {"IS_CHANGED": True}
    assert meta["methods"]["IS_CHANGED"] is None
    assert meta["methods"]["VALIDATE_INPUTS"] == {
        "args": ["cls", "x", "input_types"],
        "varkw": False,
    }
    assert meta["RETURN_TYPES"] == ("STRING",) and meta["FUNCTION"] == "go"


class Raises(Good):
    @classmethod
    def INPUT_TYPES(cls):
        raise RuntimeError("no model list")


class NotADict(Good):
    @classmethod
    def INPUT_TYPES(cls):
        return [("x", "INT")]


class NoReturnTypes:
    @classmethod
    def INPUT_TYPES(cls):
        return {}


def _function_node():
    return None


class _Raising(type):
    @property
    def CATEGORY(cls):
        raise KeyError("category")


class AttributeRaises(Good, metaclass=_Raising):
    pass


@pytest.mark.parametrize(
    ("cls", "reason"),
    [
        (Raises, "its INPUT_TYPES raised RuntimeError: no model list"),
        (NotADict, "its INPUT_TYPES gave a list, not a dict of dicts"),
        (NoReturnTypes, "it has no RETURN_TYPES"),
        (_function_node, "it is a function, not a class"),
        (AttributeRaises, "describing it raised KeyError: 'category'"),
    ],
)
def test_what_comfyui_cannot_describe_is_an_odd_node(cls, reason):
    with pytest.raises(OddNode) as odd:
        describe("Odd", cls, v3=False)
    assert str(odd.value) == reason


def test_python_module_is_what_load_custom_node_gives():
    assert python_module("/x/isolated_nodes/ComfyUI-Some.Pack/") == "custom_nodes.ComfyUI-Some.Pack"


def test_a_proxy_keeps_the_packs_python_module():
    cls = PackModule("P", (), {"AIRLOCK_PACK": "p", "RELATIVE_PYTHON_MODULE": "custom_nodes.p"})
    # What ComfyUI's load_custom_node does to every class comfy-airlock registers.
    cls.RELATIVE_PYTHON_MODULE = "custom_nodes.comfy-airlock"
    assert cls.RELATIVE_PYTHON_MODULE == "custom_nodes.p"
    cls.OTHER = 1  # every other attribute is written as usual
    assert cls.OTHER == 1


def test_folder_registrations_follow_the_hosts_directories():
    # A cached scan ran with other directories than this start's (a moved base directory).
    ran_with = {"models_dir": "/old/base/models", "base_path": "/old/base"}
    here = {"models_dir": "/new/base/models", "base_path": "/new/base"}
    entries = [
        folder_to_scan(p, ran_with)
        for p in ("/old/base/models/llm", "/old/base/prompts", "/elsewhere/llm")
    ]
    assert entries[0] == {"under": "models_dir", "path": "llm"}
    assert [folder_from_scan(e, here) for e in entries] == [
        "/new/base/models/llm",
        "/new/base/prompts",
        "/elsewhere/llm",
    ]
    assert folder_from_scan(entries[0], {}) is None

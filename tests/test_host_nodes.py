"""Another pack's node in a worker's ``nodes.NODE_CLASS_MAPPINGS`` (worker/host_nodes.py), and
the surface the host gives of it (host/node_classes.py), each side alone; the two together, in
real ComfyUIs native and isolated: test_native_parity.py
``test_another_packs_node_is_in_node_class_mappings``."""

from __future__ import annotations

import sys
import types

import pytest

from comfy_airlock.host import node_classes
from comfy_airlock.worker import host_nodes


class AnyType(str):
    def __ne__(self, other):
        return False


class Upstream:
    """A V1 node of some pack, as the host has it."""

    RETURN_TYPES = ("INT", AnyType("*"))
    OUTPUT_IS_LIST = (True, False)
    OUTPUT_NODE = False
    FUNCTION = "go"
    CATEGORY = "somewhere"
    RELATIVE_PYTHON_MODULE = "custom_nodes.some-pack"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"n": ("INT", {"default": 3})}, "optional": {"x": (AnyType("*"),)}}

    def go(self, n, x=None):
        return (list(range(n)), x)


@pytest.fixture
def host_nodes_module(monkeypatch):
    nodes = types.ModuleType("nodes")
    nodes.NODE_CLASS_MAPPINGS = {"Upstream": Upstream}
    monkeypatch.setitem(sys.modules, "nodes", nodes)
    return nodes


def test_the_host_gives_the_surface_of_its_node(host_nodes_module):
    found = node_classes.surface("Upstream")
    assert found["attrs"]["OUTPUT_IS_LIST"] == (True, False)
    assert found["attrs"]["FUNCTION"] == "go" and found["attrs"]["CATEGORY"] == "somewhere"
    assert found["INPUT_TYPES"]["required"] == {"n": ("INT", {"default": 3})}
    assert found["runs_in"] == "ComfyUI's process (custom_nodes.some-pack)"
    assert node_classes.surface("NoSuchNode") is None


def test_the_stand_in_describes_and_does_not_run(host_nodes_module):
    cls = host_nodes.stand_in("Upstream", node_classes.surface("Upstream"))
    assert cls.OUTPUT_IS_LIST == (True, False) and cls.OUTPUT_NODE is False
    # The "any" type is one again: it accepts any link (ComfyUI's validation asks `not a != b`).
    assert not cls.RETURN_TYPES[1].__ne__("IMAGE")
    assert not cls.INPUT_TYPES()["optional"]["x"][0].__ne__("LATENT")
    with pytest.raises(RuntimeError, match=r"'Upstream' runs in ComfyUI's process"):
        cls().go(3)


def test_outside_a_call_the_mapping_is_a_plain_dict(host_nodes_module, monkeypatch):
    # No call runs in this process: nothing can be asked, a missing name is missing.
    worker_nodes = types.ModuleType("nodes")
    worker_nodes.NODE_CLASS_MAPPINGS = {"Builtin": Upstream}
    monkeypatch.setitem(sys.modules, "nodes", worker_nodes)
    host_nodes.install()
    mappings = worker_nodes.NODE_CLASS_MAPPINGS
    assert isinstance(mappings, host_nodes.HostNodeMappings)
    assert mappings["Builtin"] is Upstream and "Builtin" in mappings
    assert "Upstream" not in mappings and mappings.get("Upstream", 1) == 1
    with pytest.raises(KeyError):
        mappings["Upstream"]
    host_nodes.install()  # twice: still the same object
    assert worker_nodes.NODE_CLASS_MAPPINGS is mappings


def test_a_helper_the_stand_in_lacks_is_missing_and_the_log_says_why(host_nodes_module, caplog):
    """Inspire Pack asks ``hasattr(NODE_CLASS_MAPPINGS['ImpactWildcardProcessor'], 'process')``
    (a static helper of Impact's class): absent, as on an old Impact, with a warning that says
    the two packs belong in one group; a node attribute read with a default says nothing."""
    cls = host_nodes.stand_in("Upstream", node_classes.surface("Upstream"))
    with caplog.at_level("WARNING", logger="comfy_airlock.worker"):
        assert not hasattr(cls, "process") and not hasattr(cls, "process")
        assert getattr(cls, "VALIDATE_INPUTS", None) is None
        assert not hasattr(cls, "__wrapped__")
    (record,) = caplog.records
    msg = record.getMessage()
    assert "looked for 'process' on node 'Upstream'" in msg
    assert "ComfyUI's process (custom_nodes.some-pack)" in msg and "airlock isolate --group" in msg
    with pytest.raises(AttributeError, match="type object 'Upstream' has no attribute 'process'"):
        cls.process  # noqa: B018

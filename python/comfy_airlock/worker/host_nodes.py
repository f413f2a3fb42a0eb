"""Nodes the worker does not have, as a pack finds them in ``nodes.NODE_CLASS_MAPPINGS``.

Natively every loaded node is in ``nodes.NODE_CLASS_MAPPINGS``, and packs read it at run time
for nodes that are not theirs: Easy-Use's ``indexAnything`` looks up the class of the node that
feeds it to read its ``OUTPUT_IS_LIST``, its loops read each prompt node's ``OUTPUT_NODE``. A
worker's mapping holds ComfyUI's builtin nodes and its own pack's; a node of another pack (native
in ComfyUI, or isolated in another worker) was a ``KeyError`` there. So the worker's mapping asks
the host, during a call, for a name it lacks: the host answers with that node's surface
(host/node_classes.py: ``INPUT_TYPES``, ``RETURN_TYPES``, ``OUTPUT_IS_LIST``, ``OUTPUT_NODE``...),
and the mapping keeps a class that carries it. The class describes; it does not run: its
``FUNCTION`` raises, naming the node and where it runs (a pack calling another pack's node
classes, as Inspire calls Impact's, needs both packs in one worker: a group, ADR 0054).

What asks: ``mapping[name]``, ``name in mapping``, ``mapping.get(name)``. Listing the mapping
(``keys()``, ``items()``, ``len()``) shows only what the worker has. Outside a call the lane is
not the worker's to use, so nothing is asked and the mapping answers as a plain dict. A node
found is kept (a loaded node stays loaded); "no such node" is not, since the pack's scan runs
while ComfyUI is still loading custom nodes (natively too, a pack loaded later is not there yet
at import, and is at run time). Why so, and not otherwise: ADR 0029.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from comfy_airlock.node_surface import NODE_ATTRS
from comfy_airlock.type_shapes import from_marker
from comfy_airlock.worker import server_shim

log = logging.getLogger("comfy_airlock.worker")


class HostNodeMappings(dict):
    """``nodes.NODE_CLASS_MAPPINGS`` in a worker: a dict that asks the host for a missing name."""

    def __missing__(self, name: Any) -> Any:
        cls = self._from_host(name)
        if cls is None:
            raise KeyError(name)
        return cls

    def __contains__(self, name: Any) -> bool:
        return dict.__contains__(self, name) or self._from_host(name) is not None

    def get(self, name: Any, default: Any = None) -> Any:
        if dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        cls = self._from_host(name)
        return default if cls is None else cls

    def _from_host(self, name: Any) -> type | None:
        if not isinstance(name, str):
            return None
        try:
            found = server_shim.ask_host("node_class", name=name)
        except LookupError:  # outside a call: nothing can be asked, nothing is kept
            return None
        except Exception as e:  # the pack's lookup fails as a missing name would, not worse
            log.warning("could not ask the host for node %r: %s", name, e)
            return None
        if found is None:
            return None
        cls = stand_in(name, found)
        dict.__setitem__(self, name, cls)
        return cls


# Attributes a pack may read off any node class and find absent: not a sign of a call into
# the other pack's code.
_SURFACE = frozenset(NODE_ATTRS) | {
    "FUNCTION",
    "INPUT_TYPES",
    "IS_CHANGED",
    "VALIDATE_INPUTS",
    "check_lazy_status",
    "RELATIVE_PYTHON_MODULE",
    "GET_SCHEMA",
}
_NOTED: set[tuple[str, str]] = set()


class _Elsewhere(type):
    """The stand-in's metaclass: an attribute the class lacks (a static helper such as Impact's
    ``ImpactWildcardProcessor.process``, which Inspire looks for with ``hasattr``) is missing,
    as it would be on an old version of the pack; the log says why, once per name."""

    def __getattr__(cls, attr: str) -> Any:
        name, runs_in = cls.__dict__["_airlock_node"], cls.__dict__["_airlock_runs_in"]
        if not attr.startswith("__") and attr not in _SURFACE and (name, attr) not in _NOTED:
            _NOTED.add((name, attr))
            log.warning(
                "the pack looked for %r on node %r, which runs in %s, not in this worker: its "
                "class here only describes it. To call another pack's node code, isolate both "
                "packs in one group (`airlock isolate --group`, docs/user-guide.md section 2)",
                attr,
                name,
                runs_in,
            )
        raise AttributeError(f"type object {name!r} has no attribute {attr!r}")


def stand_in(name: str, found: dict[str, Any]) -> type:
    """A class with the surface of the host's node ``name``, whose function raises."""
    attrs: dict[str, Any] = {k: from_marker(v) for k, v in found["attrs"].items()}
    input_types = from_marker(found.get("INPUT_TYPES"))
    runs_in = found.get("runs_in", "another process")

    def input_types_of(cls: type) -> Any:
        if input_types is None:
            raise RuntimeError(f"node {name!r}: its INPUT_TYPES failed in {runs_in}")
        return input_types

    def runs_elsewhere(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"node {name!r} runs in {runs_in}, not in this pack's worker: its class here "
            "describes it (INPUT_TYPES, RETURN_TYPES, OUTPUT_IS_LIST...) but cannot run it; "
            "to call another pack's node classes, isolate both packs in one group (a folder "
            "whose airlock.toml says packs = [...]: docs/user-guide.md, section 2)"
        )

    attrs["INPUT_TYPES"] = classmethod(input_types_of)
    attrs[str(attrs.get("FUNCTION") or "execute")] = runs_elsewhere
    attrs["__doc__"] = f"Node {name!r} of {runs_in}, as this worker sees it (no function)."
    attrs["__module__"] = __name__
    attrs["_airlock_node"], attrs["_airlock_runs_in"] = name, runs_in
    return _Elsewhere(name if name.isidentifier() else "HostNode", (), attrs)


def install() -> None:
    """Makes the worker's ``nodes.NODE_CLASS_MAPPINGS`` one that asks the host (once ComfyUI's
    builtin nodes are in it, before the pack imports and binds it)."""
    nodes = sys.modules.get("nodes")
    mappings = getattr(nodes, "NODE_CLASS_MAPPINGS", None)
    if isinstance(mappings, dict) and not isinstance(mappings, HostNodeMappings):
        nodes.NODE_CLASS_MAPPINGS = HostNodeMappings(mappings)  # type: ignore[union-attr]

"""One node class described as plain data for the host's proxy, read in the worker.

ComfyUI tolerates odd nodes: a bool ``IS_CHANGED`` only makes it warn and re-run the node, a
class whose ``INPUT_TYPES`` raises is left out of ``/object_info``. So an odd node never drops
its pack here either: :func:`describe` raises :class:`OddNode` for what ComfyUI itself could
not describe (the scan reports that node by name and goes on), and carries everything else as
it is, non-callable method attributes included, so that the host's ComfyUI treats the proxy as
it would the real class.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from comfy_airlock.node_surface import NODE_ATTRS
from comfy_airlock.type_shapes import plain

log = logging.getLogger("comfy_airlock.worker")

# The optional methods ComfyUI looks for, by V1 name, with the V3 name it uses instead.
METHODS = {
    "IS_CHANGED": "fingerprint_inputs",
    "VALIDATE_INPUTS": "validate_inputs",
    "check_lazy_status": "check_lazy_status",
}


class OddNode(Exception):
    """A node ComfyUI could not describe either; the message says why. ``raised``: the pack's
    own code raised while describing it (``INPUT_TYPES``, a schema): natively ComfyUI asks
    again at every ``/object_info``, so an answer may come later (a folder made, a network
    back); otherwise the node's shape itself is wrong and stays so."""

    def __init__(self, message: str, *, raised: bool = False) -> None:
        super().__init__(message)
        self.raised = raised


def _argspec(fn: Any) -> dict[str, Any]:
    # ComfyUI reads VALIDATE_INPUTS' argument names with getfullargspec: the same here.
    spec = inspect.getfullargspec(fn)
    return {"args": list(spec.args), "varkw": spec.varkw is not None}


def _v1_methods(node_id: str, cls: type) -> tuple[dict[str, Any], dict[str, Any]]:
    """Argument specs of the callable ones; the values of the ones that are not (ComfyUI
    calls them anyway, warns and carries on: the proxy gets the same value)."""
    methods: dict[str, Any] = {}
    constants: dict[str, Any] = {}
    for name in METHODS:
        if not hasattr(cls, name):
            methods[name] = None
            continue
        value = getattr(cls, name)
        if callable(value):
            try:
                methods[name] = _argspec(value)
            except TypeError as e:
                raise OddNode(f"its {name} has no readable signature ({e})") from e
        else:
            methods[name] = None
            constants[name] = plain(value, f"{node_id}.{name}")
            log.warning(
                "node %r: %s is a %s, not a method; ComfyUI calls it, warns and goes on, "
                "and so does its proxy",
                node_id,
                name,
                type(value).__name__,
            )
    return methods, constants


def _v1(node_id: str, cls: type) -> dict[str, Any]:
    try:
        inputs = cls.INPUT_TYPES()
    except Exception as e:
        raise OddNode(f"its INPUT_TYPES raised {type(e).__name__}: {e}", raised=True) from e
    if not isinstance(inputs, dict) or not all(isinstance(v, dict) for v in inputs.values()):
        raise OddNode(f"its INPUT_TYPES gave a {type(inputs).__name__}, not a dict of dicts")
    if not hasattr(cls, "RETURN_TYPES"):
        raise OddNode("it has no RETURN_TYPES")
    meta: dict[str, Any] = {"kind": "v1", "INPUT_TYPES": plain(inputs, node_id)}
    for attr in (*NODE_ATTRS, "FUNCTION"):
        if hasattr(cls, attr):
            meta[attr] = plain(getattr(cls, attr), f"{node_id}.{attr}")
    meta["methods"], meta["constants"] = _v1_methods(node_id, cls)
    return meta


def _v3(node_id: str, cls: type) -> dict[str, Any]:
    from comfy_api.internal import first_real_override

    try:
        info = cls.GET_NODE_INFO_V1()
    except Exception as e:
        raise OddNode(f"its schema raised {type(e).__name__}: {e}", raised=True) from e
    methods = {}
    for v1_name, v3_name in METHODS.items():
        fn = first_real_override(cls, v3_name)
        methods[v1_name] = None if fn is None else _argspec(fn)
    # ComfyUI serves GET_NODE_INFO_V1 as the node's /object_info entry; the host's proxy serves
    # this very dict, and runs like a V3 class (ADR 0005).
    return plain(
        {
            "kind": "v3",
            "info": info,
            "INPUT_TYPES": info["input"],
            "NOT_IDEMPOTENT": bool(getattr(cls, "NOT_IDEMPOTENT", False)),
            "ACCEPT_ALL_INPUTS": bool(getattr(cls, "ACCEPT_ALL_INPUTS", False)),
            "methods": methods,
        },
        node_id,
    )


def describe(node_id: str, cls: Any, v3: bool) -> dict[str, Any]:
    """The node as the host's proxy needs it; raises :class:`OddNode`."""
    if not isinstance(cls, type):
        raise OddNode(f"it is a {type(cls).__name__}, not a class")
    try:
        return _v3(node_id, cls) if v3 else _v1(node_id, cls)
    except OddNode:
        raise
    except Exception as e:  # an attribute that raises when read, say: this node only
        raise OddNode(f"describing it raised {type(e).__name__}: {e}", raised=True) from e

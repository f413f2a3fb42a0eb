"""What a worker sees of a node it does not have: the surface of a class in the host's
``nodes.NODE_CLASS_MAPPINGS`` (worker/host_nodes.py asks for it by name, during a call).

The surface is what the class declares, made plain: ``INPUT_TYPES()`` and the class attributes
ComfyUI reads (``RETURN_TYPES``, ``OUTPUT_IS_LIST``, ``OUTPUT_NODE``, ``FUNCTION``...), the "any"
and flexible shapes as markers (type_shapes). What runs is what ``/object_info`` runs too:
``INPUT_TYPES`` and, for a V3 class, the properties that compute those attributes from its
schema; the host's list is only read.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from comfy_airlock.node_surface import NODE_ATTRS
from comfy_airlock.type_shapes import plain

log = logging.getLogger("comfy_airlock")

SURFACE_ATTRS = (*NODE_ATTRS, "FUNCTION")


def surface(name: str) -> dict[str, Any] | None:
    """The surface of the node class ``name``, or None where the host has no such node."""
    mappings = getattr(sys.modules.get("nodes"), "NODE_CLASS_MAPPINGS", None)
    cls = mappings.get(name) if isinstance(mappings, dict) else None
    if cls is None:
        return None
    where = f"node {name!r}"
    attrs = {a: plain(getattr(cls, a), where) for a in SURFACE_ATTRS if hasattr(cls, a)}
    try:
        input_types = plain(cls.INPUT_TYPES(), where)
    except Exception as e:  # ComfyUI leaves such a node out of /object_info; so do we
        log.debug("node %r: INPUT_TYPES raised %s", name, e)
        input_types = None
    pack = getattr(cls, "AIRLOCK_PACK", None)
    return {
        "attrs": attrs,
        "INPUT_TYPES": input_types,
        # Where the real class runs, for the error its stand-in raises when called.
        "runs_in": f"the worker of isolated pack {pack!r}"
        if pack
        else f"ComfyUI's process ({getattr(cls, 'RELATIVE_PYTHON_MODULE', 'nodes')})",
    }

"""The pack's node inputs as its code gives them now, for the host's ``/object_info`` and
validation (host/live_inputs.py, ADR 0022): a node whose ``INPUT_TYPES`` lists model files
(``folder_paths.get_filename_list``) lists a file added since the scan, as it would natively."""

from __future__ import annotations

import logging
from typing import Any

from comfy_airlock.type_shapes import plain
from comfy_airlock.worker import comfy

log = logging.getLogger("comfy_airlock.worker")


def describe_inputs() -> dict[str, dict[str, Any]]:
    """``{node_id: {"INPUT_TYPES": ...}}`` for every node, with ``"info"`` (its whole
    ``/object_info`` entry, which a V3 schema computes) for V3 nodes. A node whose answer
    raises is left out: the host keeps its last one."""
    nodes, v3 = comfy.loaded_nodes()
    out: dict[str, dict[str, Any]] = {}
    for node_id, cls in nodes.items():
        try:
            if node_id in v3:
                info = plain(cls.GET_NODE_INFO_V1(), node_id)
                out[node_id] = {"info": info, "INPUT_TYPES": info["input"]}
            else:
                out[node_id] = {"INPUT_TYPES": plain(cls.INPUT_TYPES(), node_id)}
        except Exception as e:
            log.debug(
                "node %r: its inputs are not read again: %s: %s", node_id, type(e).__name__, e
            )
    return out

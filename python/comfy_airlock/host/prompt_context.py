"""What ComfyUI gives a node about its prompt, sent with each node call to the worker, where
worker/prompt_context.py gives it back to the node (ADR 0022):

- ComfyUI's executing context, ``(prompt_id, node_id, list_index)``, which it sets around
  every node method it runs (``comfy_execution.utils.get_executing_context()``); a proxy's
  method runs inside it, on ComfyUI's thread, so it is read here as the node would read it;
- the id prefix ComfyUI sets on ``GraphBuilder`` before it runs a node's function (its
  ``pre_execute_cb``), so the nodes an isolated node expands into get the ids they would get
  natively (without it a worker's would start at ``.0.0.``, the same in every worker);
- the ``DynamicPrompt`` of a ``DYNPROMPT`` input, a live host object, as its plain state
  (prompt_surface.py); the input itself crosses as None and is filled in the worker.

``PROMPT``, ``EXTRA_PNGINFO``, ``UNIQUE_ID`` and the other hidden inputs are plain values
already and cross as the node's arguments.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from comfy_airlock.prompt_surface import encode_dynprompt


def executing() -> list[Any] | None:
    """ComfyUI's context of the node running on this thread; None outside one."""
    utils = sys.modules.get("comfy_execution.utils")
    get = getattr(utils, "get_executing_context", None)
    ctx = get() if get is not None else None
    if ctx is None:
        return None
    return [ctx.prompt_id, ctx.node_id, ctx.list_index]


def graph_prefix() -> list[Any] | None:
    """``GraphBuilder``'s default id prefix as ComfyUI set it for this node call (read only)."""
    utils = sys.modules.get("comfy_execution.graph_utils")
    builder = getattr(utils, "GraphBuilder", None)
    if builder is None:
        return None
    return [
        builder._default_prefix_root,
        builder._default_prefix_call_index,
        builder._default_prefix_graph_index,
    ]


#: A node call's inputs as they cross: the arguments, and the context to send with them.
Outbound = tuple[dict[str, Any], dict[str, Any] | None]


def outbound(kwargs: dict[str, Any], dynprompt_inputs: Iterable[str]) -> Outbound:
    """The arguments to send, and the context to send with them (None: nothing to add)."""
    context: dict[str, Any] = {}
    dynprompts = {}
    for name in dynprompt_inputs:
        value = kwargs.get(name)
        if value is not None:
            dynprompts[name] = encode_dynprompt(value)
            kwargs[name] = None
    if dynprompts:
        context["dynprompt"] = dynprompts
    current = executing()
    if current is not None:
        context["executing"] = current
        context["graph_prefix"] = graph_prefix()
    return kwargs, (context or None)

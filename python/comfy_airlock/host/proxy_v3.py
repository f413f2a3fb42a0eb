"""Proxies of V3 nodes (``comfy_api.latest.io.ComfyNode``): V3 classes to ComfyUI, so that it
describes and runs them exactly as the real ones (ADR 0005).

ComfyUI serves a V3 class's ``GET_NODE_INFO_V1()`` as its ``/object_info`` entry; a V1 class
gets another shape (``deprecated: false`` left out, hidden inputs as strings...), so the proxy
is a V3 class that serves the worker's dict as it is. Everything ComfyUI's execution asks of a
V3 class is here: the finalized ``INPUT_TYPES``, ``PREPARE_CLASS_CLONE`` (ComfyUI's own, which
fills ``hidden``), the placeholder methods ``first_real_override`` compares against, and the
class properties a schema would give, as plain attributes. There is no schema on this side:
``define_schema`` exists only because ComfyUI checks that it is overridden.
"""

from __future__ import annotations

import copy
from typing import Any

from comfy_airlock.host import live_inputs, prompt_context
from comfy_airlock.host.pack import IsolatedPack
from comfy_airlock.host.proxy import (
    PackModule,
    _fix_outputs,
    _signature,
    class_name,
    run_node,
)
from comfy_airlock.node_surface import HIDDEN_PREFIX, node_module

# V3's V1 method names in the scan's ``methods``, and the V3 names ComfyUI calls.
_V3_NAMES = {
    "IS_CHANGED": "fingerprint_inputs",
    "VALIDATE_INPUTS": "validate_inputs",
    "check_lazy_status": "check_lazy_status",
}


def _class_attrs(info: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """The class properties a V3 schema would compute, from its V1 description."""
    outputs = tuple(info.get("output") or ())
    accept_all = bool(meta.get("ACCEPT_ALL_INPUTS"))
    return {
        "RETURN_TYPES": outputs,
        "RETURN_NAMES": tuple(info.get("output_name") or outputs),
        "OUTPUT_IS_LIST": tuple(info.get("output_is_list") or (False,) * len(outputs)),
        "OUTPUT_TOOLTIPS": tuple(info.get("output_tooltips") or ()),
        "INPUT_IS_LIST": bool(info.get("is_input_list")),
        "OUTPUT_NODE": bool(info.get("output_node")),
        "HAS_INTERMEDIATE_OUTPUT": bool(info.get("has_intermediate_output")),
        "CATEGORY": info.get("category"),
        "DESCRIPTION": info.get("description"),
        "DEPRECATED": bool(info.get("deprecated")),
        "EXPERIMENTAL": bool(info.get("experimental")),
        "DEV_ONLY": bool(info.get("dev_only")),
        "API_NODE": bool(info.get("api_node")),
        "NOT_IDEMPOTENT": bool(meta.get("NOT_IDEMPOTENT")),
        "ACCEPT_ALL_INPUTS": accept_all,
        "_ACCEPT_ALL_INPUTS": accept_all,
    }


def build_v3_proxy(pack: IsolatedPack, node_id: str, meta: dict[str, Any]) -> type:
    from comfy_api.latest import _io

    module = node_module(pack.dir, meta)
    info = dict(meta["info"])
    info["python_module"] = module
    input_types = meta["INPUT_TYPES"]
    hidden = list((input_types.get("hidden") or {}).keys())
    methods = meta.get("methods") or {}
    outputs_meta = {"RETURN_TYPES": tuple(info.get("output") or ())}

    def with_hidden(cls: Any, kwargs: dict[str, Any]) -> prompt_context.Outbound:
        # ComfyUI's PREPARE_CLASS_CLONE put the hidden values on the clone, apart from the
        # inputs (a node may have an input named like a hidden value: Easy-Use's promptLine
        # has an input "prompt" and hidden PROMPT); they travel under HIDDEN_PREFIX keys, the
        # worker's real class gets them as hidden, DYNPROMPT rebuilt there (ADR 0022).
        holder = getattr(cls, "hidden", None)
        for name in hidden:
            kwargs[HIDDEN_PREFIX + name] = getattr(holder, name, None)
        dynprompt = HIDDEN_PREFIX + "dynprompt"
        return prompt_context.outbound(kwargs, [dynprompt] if "dynprompt" in hidden else ())

    def forward(method: str):
        def call(cls: Any, **kwargs: Any) -> Any:
            return run_node(pack, node_id, "", method, with_hidden(cls, kwargs))

        return call

    def execute(cls: Any, **kwargs: Any) -> Any:
        out = run_node(pack, node_id, "", "execute", with_hidden(cls, kwargs))
        return _fix_outputs(outputs_meta, out)

    def define_schema(cls: Any) -> Any:
        raise NotImplementedError(f"node {node_id!r}: its schema lives in its worker")

    def get_node_info_v1(cls: Any) -> dict[str, Any]:
        # The worker's own answer while it runs, as native code would give (ADR 0022).
        live = live_inputs.info(pack, node_id, info)
        return copy.deepcopy({**live, "python_module": module})

    def get_input_types(cls: Any) -> dict[str, Any]:
        return live_inputs.input_types(pack, node_id, input_types)

    attrs: dict[str, Any] = {
        "__doc__": f"Node {node_id!r} of the isolated pack {pack.name!r} (runs in its worker).",
        "__module__": f"comfy_airlock.isolated.{pack.name}",
        "AIRLOCK_PACK": pack.name,
        "RELATIVE_PYTHON_MODULE": module,
        "FUNCTION": "execute",
        "execute": classmethod(execute),
        "define_schema": classmethod(define_schema),
        "GET_NODE_INFO_V1": classmethod(get_node_info_v1),
        "INPUT_TYPES": classmethod(get_input_types),
        **_class_attrs(info, meta),
    }
    for v1_name, v3_name in _V3_NAMES.items():
        spec = methods.get(v1_name)
        if spec:
            fn = forward(v1_name)
            # ComfyUI passes validate_inputs only the inputs its signature names.
            fn.__signature__ = _signature(spec)  # type: ignore[attr-defined]
            attrs[v3_name] = classmethod(fn)
    return PackModule(class_name(node_id), (_io._ComfyNodeBaseInternal,), attrs)

"""Proxy node classes: built from a pack's scanned metadata, registered in ComfyUI like any
node, forwarding each method the pack defines to its worker.

ComfyUI inspects nodes by attribute (``INPUT_TYPES``, ``RETURN_TYPES``, ``FUNCTION``…) and by
signature (``VALIDATE_INPUTS``'s argument names choose what it is passed), so a proxy carries
the same attributes and signatures as the real class; it carries no pack code. V3 nodes are
proxied through ComfyUI's V1 interface (their ``GET_NODE_INFO_V1``), see ADR 0005.
"""

from __future__ import annotations

import inspect
import logging
import sys
import uuid
from typing import Any

from comfy_airlock import host_values, pack_values, type_shapes
from comfy_airlock.comfy_values import register_comfy_codecs
from comfy_airlock.host import live_inputs, prompt_context
from comfy_airlock.host.pack import IsolatedPack
from comfy_airlock.node_surface import NODE_ATTRS, model_kind, node_module

log = logging.getLogger("comfy_airlock")
pack_values.install_host()
host_values.install_host()
register_comfy_codecs()

# Declared types whose values are model objects living in one process.
MODEL_TYPES = {"MODEL", "CLIP", "VAE", "CONTROL_NET", "CLIP_VISION", "STYLE_MODEL", "GLIGEN"}
# Declared types that ComfyUI expects as torch tensors (or containers of them).
TENSOR_TYPES = {"IMAGE", "MASK", "LATENT", "CONDITIONING", "SIGMAS", "NOISE", "AUDIO"}


class PackModule(type):
    """The metaclass of proxies: ``RELATIVE_PYTHON_MODULE`` stays the pack's. ComfyUI sets it
    on every class our custom node registers, to ``custom_nodes.comfy-airlock``; natively it
    would be the pack's own (``/object_info``'s ``python_module``, by which the frontend groups
    nodes), which is what the proxy was built with."""

    def __setattr__(cls, name: str, value: Any) -> None:
        if name == "RELATIVE_PYTHON_MODULE" and "AIRLOCK_PACK" in cls.__dict__:
            return
        super().__setattr__(name, value)


def _signature(spec: dict[str, Any]) -> inspect.Signature:
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter(a, kind) for a in spec["args"] if a.isidentifier()]
    if spec.get("varkw"):
        params.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(params)


def _check_inputs(pack: str, node_id: str, kwargs: dict[str, Any]) -> None:
    for name, value in kwargs.items():
        items = value if isinstance(value, list) else [value]
        for v in items:
            kind = model_kind(v)
            if kind is not None:
                raise TypeError(
                    f"[comfy-airlock] node {node_id!r} of isolated pack {pack!r}: input "
                    f"{name!r} is a {kind}. Model objects (MODEL, CLIP, VAE, CONTROL_NET) "
                    "cannot cross the process boundary; load the model with a node of the "
                    "same pack, inside its worker"
                )


def run_node(
    pack: IsolatedPack,
    node_id: str,
    key: str,
    method: str,
    inputs: prompt_context.Outbound,
) -> Any:
    """One forwarded node method: its inputs checked (a value of another pack's worker, a
    model of ComfyUI's, fail here, named), the values ComfyUI let go of released in the
    worker first, and the references in its result stamped with this pack (ADR 0023).
    ComfyUI's objects inside its inputs stay here for the call (ADR 0064)."""
    _check_inputs(pack.name, node_id, inputs[0])
    pack_values.check_inputs(pack.name, node_id, inputs[0])
    for token, ids in pack_values.pending_releases(pack.name).items():
        if pack.alive():
            pack.call("comfy_airlock.pack_values:release", token, ids)
    with host_values.holding():
        return pack_values.claim(pack.name, pack.run(node_id, key, method, inputs))


def _to_torch(value: Any) -> Any:
    """Arrays from a numpy-only worker become tensors (ComfyUI's currency), without a copy."""
    np = sys.modules.get("numpy")
    torch = sys.modules.get("torch")
    if np is None or torch is None:
        return value
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    if isinstance(value, list):
        return [_to_torch(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_to_torch(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_torch(v) for k, v in value.items()}
    return value


def _tensor_type(declared: Any) -> bool:
    # A marker of a pack's "any" type is a dict here: not a tensor type.
    return isinstance(declared, str) and str.__str__(declared) in TENSOR_TYPES


def _fix_outputs(meta: dict[str, Any], out: Any) -> Any:
    types_ = list(meta.get("RETURN_TYPES") or ())

    def fix(result: Any) -> Any:
        if not isinstance(result, (tuple, list)):
            return result
        return tuple(
            _to_torch(v) if i < len(types_) and _tensor_type(types_[i]) else v
            for i, v in enumerate(result)
        )

    if isinstance(out, dict):
        if "result" in out:
            out = dict(out)
            out["result"] = fix(out["result"])
        return out
    return fix(out)


def build_v1_proxy(pack: IsolatedPack, node_id: str, meta: dict[str, Any]) -> type:
    # "Any" types and flexible inputs as the pack's classes behave (type_shapes.py).
    input_types = type_shapes.from_marker(meta["INPUT_TYPES"])
    hidden = dict(input_types.get("hidden") or {})
    # Inputs ComfyUI fills with its live DynamicPrompt: rebuilt in the worker (ADR 0022).
    dynprompts = [name for name, kind in hidden.items() if kind == "DYNPROMPT"]
    function = meta.get("FUNCTION") or "execute"
    methods = meta.get("methods") or {}

    def __init__(self) -> None:
        # The worker keeps one instance of the real class per proxy instance (ComfyUI keeps
        # one per node id), so state a V1 node stores on ``self`` persists as it would.
        self._airlock_key = uuid.uuid4().hex

    def INPUT_TYPES(cls) -> dict[str, Any]:
        # The worker's own answer while it runs, as native code would give (ADR 0022).
        return live_inputs.input_types(pack, node_id, input_types)

    def run(self, **kwargs: Any) -> Any:
        args = prompt_context.outbound(kwargs, dynprompts)
        return _fix_outputs(meta, run_node(pack, node_id, self._airlock_key, function, args))

    attrs: dict[str, Any] = {
        "__init__": __init__,
        "__doc__": f"Node {node_id!r} of the isolated pack {pack.name!r} (runs in its worker).",
        "__module__": f"comfy_airlock.isolated.{pack.name}",
        "INPUT_TYPES": classmethod(INPUT_TYPES),
        "FUNCTION": function,
        function: run,
        "AIRLOCK_PACK": pack.name,
        "RELATIVE_PYTHON_MODULE": node_module(pack.dir, meta),
    }
    # Non-callable IS_CHANGED & co. as the pack has them: ComfyUI treats them as natively.
    attrs.update(meta.get("constants") or {})
    for attr in NODE_ATTRS:
        if attr in meta:
            attrs[attr] = type_shapes.from_marker(meta[attr])
    attrs.setdefault("RETURN_TYPES", ())
    for attr in ("RETURN_TYPES", "RETURN_NAMES", "OUTPUT_IS_LIST", "OUTPUT_TOOLTIPS"):
        if isinstance(attrs.get(attr), list):
            attrs[attr] = tuple(attrs[attr])

    if methods.get("IS_CHANGED"):

        def IS_CHANGED(cls, **kwargs: Any) -> Any:
            args = prompt_context.outbound(kwargs, dynprompts)
            return run_node(pack, node_id, "", "IS_CHANGED", args)

        attrs["IS_CHANGED"] = classmethod(IS_CHANGED)

    if methods.get("VALIDATE_INPUTS"):
        spec = methods["VALIDATE_INPUTS"]

        def VALIDATE_INPUTS(*args: Any, **kwargs: Any) -> Any:
            args = prompt_context.outbound(kwargs, ())
            return run_node(pack, node_id, "", "VALIDATE_INPUTS", args)

        # ComfyUI passes only the inputs this signature names (and input_types if named).
        VALIDATE_INPUTS.__signature__ = _signature(spec)  # type: ignore[attr-defined]
        attrs["VALIDATE_INPUTS"] = classmethod(VALIDATE_INPUTS)

    if methods.get("check_lazy_status"):

        def check_lazy_status(self, **kwargs: Any) -> Any:
            args = prompt_context.outbound(kwargs, dynprompts)
            return run_node(pack, node_id, self._airlock_key, "check_lazy_status", args)

        attrs["check_lazy_status"] = check_lazy_status

    return PackModule(class_name(node_id), (), attrs)


def class_name(node_id: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in node_id)

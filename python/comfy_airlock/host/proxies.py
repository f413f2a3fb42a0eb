"""Which proxy a scanned node gets: a V1 class (``proxy.py``) or a V3 one (``proxy_v3.py``),
and the note for a node whose models stay in its worker (ADR 0023)."""

from __future__ import annotations

import logging
from typing import Any

from comfy_airlock.host.pack import IsolatedPack
from comfy_airlock.host.proxy import MODEL_TYPES, build_v1_proxy
from comfy_airlock.host.proxy_v3 import build_v3_proxy

log = logging.getLogger("comfy_airlock")


def build_proxy(pack: IsolatedPack, node_id: str, meta: dict[str, Any]) -> type:
    """A node class that ComfyUI cannot tell from the real one, except that it runs nowhere."""
    if meta.get("kind") == "v3":
        cls = build_v3_proxy(pack, node_id, meta)
    else:
        cls = build_v1_proxy(pack, node_id, meta)
    _warn_models(pack, node_id, meta, cls)
    return cls


def _warn_models(pack: IsolatedPack, node_id: str, meta: dict[str, Any], cls: type) -> None:
    # str.__str__: a pack's "any" type may be unhashable (type_shapes.py).
    returns = getattr(cls, "RETURN_TYPES", ()) or ()
    declared = {str.__str__(t) for t in returns if isinstance(t, str)}
    for section in ("required", "optional"):
        for spec_ in dict(meta["INPUT_TYPES"].get(section) or {}).values():
            if isinstance(spec_, (list, tuple)) and spec_ and isinstance(spec_[0], str):
                declared.add(str.__str__(spec_[0]))
    crossing = sorted(declared & MODEL_TYPES)
    if crossing:
        log.debug(
            "[comfy-airlock] node %r of isolated pack %r takes or returns %s: model objects "
            "stay in the pack's worker; they pass between the pack's own nodes, never to or "
            "from a node of ComfyUI or of another pack",
            node_id,
            pack.name,
            ", ".join(crossing),
        )

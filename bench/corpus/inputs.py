"""A prompt that runs one node with simple inputs, made from its ``/object_info`` entry only
(pure: no I/O). Widgets get their defaults (or their first choice, or their minimum); IMAGE,
MASK, LATENT, AUDIO and ``*`` inputs come from the probe pack's sources; each output goes to a
``CorpusDigest``. A required input of any other type (MODEL, CONDITIONING, a pack's own type)
cannot be made generically: the node is "not run", with the types named.

    prompt, why_not = node_prompt("ImageBlur", info["ImageBlur"])
"""

from __future__ import annotations

from typing import Any

SOURCES = {
    "IMAGE": "CorpusImage",
    "MASK": "CorpusMask",
    "LATENT": "CorpusLatent",
    "AUDIO": "CorpusAudio",
    "*": "CorpusAny",
}
NODE_ID = "1"


class NotRunnable(Exception):
    """The node needs an input the generator cannot make (the message names it)."""


def _number(opts: dict[str, Any], kind: type) -> int | float:
    value = opts.get("default")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        value = opts.get("min", 0)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        value = 0
    lo, hi = opts.get("min"), opts.get("max")
    if isinstance(lo, (int, float)) and value < lo:
        value = lo
    if isinstance(hi, (int, float)) and value > hi:
        value = hi
    return kind(value)


def _combo(choices: list[Any], opts: dict[str, Any], name: str) -> Any:
    if "default" in opts and opts["default"] in choices:
        return opts["default"]
    if not choices:
        raise NotRunnable(f"input {name!r} is a combo with no choice")
    return choices[0]


def widget_value(name: str, spec: Any) -> tuple[str, Any]:
    """("widget", value) or ("link", TYPE) for one input spec ``[type, opts]``."""
    kind = spec[0] if isinstance(spec, (list, tuple)) and spec else spec
    opts = spec[1] if isinstance(spec, (list, tuple)) and len(spec) > 1 else {}
    opts = opts if isinstance(opts, dict) else {}
    if isinstance(kind, list):
        return "widget", _combo(kind, opts, name)
    if kind == "COMBO":
        return "widget", _combo(list(opts.get("options") or []), opts, name)
    if opts.get("forceInput") or opts.get("rawLink"):
        return "link", kind
    if kind == "INT":
        return "widget", _number(opts, int)
    if kind == "FLOAT":
        return "widget", _number(opts, float)
    if kind == "BOOLEAN":
        return "widget", bool(opts.get("default", False))
    if kind == "STRING":
        default = opts.get("default", "")
        return "widget", default if isinstance(default, str) else str(default)
    return "link", kind


def _source_for(kind: Any, name: str) -> str:
    if not isinstance(kind, str):
        raise NotRunnable(f"input {name!r} has a type that is not a name: {kind!r}")
    for part in (t.strip() for t in kind.split(",")):
        if part in SOURCES:
            return SOURCES[part]
    raise NotRunnable(f"needs {kind}")


def _inputs(
    entry: dict[str, Any], prompt: dict[str, Any], producers: dict[str, tuple[str, dict]] | None
) -> dict[str, Any]:
    """The node's required inputs; sources (and producers) it links to go into ``prompt``."""
    inputs: dict[str, Any] = {}
    missing = []
    required = (entry.get("input") or {}).get("required") or {}
    for name, spec in required.items():
        how, value = widget_value(name, spec)
        if how == "widget":
            inputs[name] = value
            continue
        try:
            source = _source_for(value, name)
            src_id = f"src_{source}"
            prompt[src_id] = {"class_type": source, "inputs": {}}
            inputs[name] = [src_id, 0]
            continue
        except NotRunnable as e:
            if producers is None or value not in producers:
                missing.append(str(e).removeprefix("needs "))
                continue
        maker, maker_entry = producers[value]
        src_id = f"make_{value}"
        # A producer's own inputs are made without producers: one level deep.
        prompt[src_id] = {"class_type": maker, "inputs": _inputs(maker_entry, prompt, None)}
        inputs[name] = [src_id, maker_entry["output"].index(value)]
    if missing:
        raise NotRunnable("needs " + ", ".join(sorted(set(map(str, missing)))))
    return inputs


def producers(nodes: dict[str, dict[str, Any]]) -> dict[str, tuple[str, dict]]:
    """For each output type of the pack's nodes that the sources cannot make: a node of the
    pack that makes it from generated inputs alone (the one with the fewest inputs, then by
    name), so that a node taking the pack's own type (VEC2, NUMBER, ...) can run too."""
    found: dict[str, tuple[int, str, dict]] = {}
    for name, entry in nodes.items():
        try:
            _inputs(entry, {}, None)
        except NotRunnable:
            continue
        arity = len((entry.get("input") or {}).get("required") or {})
        for kind in entry.get("output") or []:
            if not isinstance(kind, str) or kind in SOURCES:
                continue
            if kind not in found or (arity, name) < found[kind][:2]:
                found[kind] = (arity, name, entry)
    return {kind: (name, entry) for kind, (_, name, entry) in found.items()}


def node_prompt(
    class_type: str,
    entry: dict[str, Any],
    makers: dict[str, tuple[str, dict]] | None = None,
) -> dict[str, Any]:
    """The prompt for ``class_type`` (node id ``NODE_ID``), its inputs made by sources or by
    ``makers`` (from :func:`producers`); raises :class:`NotRunnable`."""
    outputs = entry.get("output") or []
    if not outputs and not entry.get("output_node"):
        raise NotRunnable("has no output and is not an output node (ComfyUI never runs it)")
    prompt: dict[str, Any] = {}
    prompt[NODE_ID] = {"class_type": class_type, "inputs": _inputs(entry, prompt, makers)}
    for i, _ in enumerate(outputs):
        prompt[f"digest_{i}"] = {"class_type": "CorpusDigest", "inputs": {"value": [NODE_ID, i]}}
    return prompt

"""Two shapes real packs give their ``INPUT_TYPES`` and ``RETURN_TYPES`` that plain data would
lose, carried across as markers and made again in the host, so that ComfyUI's validation and
execution treat the proxy as the real class:

- **"Any" types**: a ``str`` subclass whose ``!=`` (and sometimes ``==``) always says "same"
  (``AnyType("*")``, ``AlwaysEqualProxy("*")``, ``AnyType("Select widget for options")``).
  ComfyUI's ``validate_node_input`` compares with ``not a != b``, so such a type accepts any
  link, whatever its name. Made again as a ``str`` of the same value and the same comparison
  (and hash: a class overriding ``__eq__`` alone has none, and ComfyUI's validation then fails
  the same way, natively and isolated).
- **Flexible inputs**: a ``dict`` subclass that contains every key (rgthree's
  ``FlexibleOptionalInputType``): ComfyUI passes the node any input the frontend added (a
  dynamic number of inputs, widget values too), typed by what the dict gives for an unknown
  key. Without it, ComfyUI would drop every input not listed.

JSON of either is what natively serves (``/object_info`` is the same): the string, the items.
:func:`plain` makes the markers (the worker's scan, for the host's proxies; the host, for a node
a worker looks up in ``nodes.NODE_CLASS_MAPPINGS``); :func:`from_marker` turns them back.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("comfy_airlock")

KEY = "__airlock_shape__"
_PROBE = "\x00airlock-probe"


def any_type_of(value: Any) -> dict[str, Any] | None:
    """The marker of an "any" type, or None if ``value`` is not one."""
    if not isinstance(value, str) or type(value) is str:
        return None
    t = type(value)
    if t.__ne__ is str.__ne__ and t.__eq__ is str.__eq__:
        return None
    return {
        KEY: "any",
        "value": str.__str__(value),
        "ne": bool(value != _PROBE),
        "eq": bool(value == _PROBE),
        "hashable": t.__hash__ is not None,
    }


def flexible_of(value: Any) -> tuple[Any, Any] | None:
    """(the spec of an unknown key, the listed items) of a dict that contains every key."""
    if not isinstance(value, dict) or type(value) is dict:
        return None
    try:
        if _PROBE not in value:
            return None
        return value[_PROBE], dict(value.items())
    except Exception:
        return None


# --- the host's side ------------------------------------------------------------------------

_ANY_CLASSES: dict[tuple[bool, bool, bool], type] = {}


def _any_class(ne: bool, eq: bool, hashable: bool) -> type:
    key = (ne, eq, hashable)
    if key not in _ANY_CLASSES:
        attrs: dict[str, Any] = {
            "__ne__": lambda self, other: ne,
            "__eq__": lambda self, other: eq,
            "__hash__": str.__hash__ if hashable else None,
            "__doc__": "An isolated pack's 'any' type: compares as the pack's class does.",
        }
        _ANY_CLASSES[key] = type("AnyType", (str,), attrs)
    return _ANY_CLASSES[key]


class FlexibleInputs(dict):
    """An isolated pack's flexible inputs: every key is in it; an unlisted one has the spec the
    pack gives for any key."""

    def __init__(self, any_spec: Any, items: dict[str, Any]) -> None:
        super().__init__(items)
        self.any_spec = any_spec

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: Any) -> Any:
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        return self.any_spec


def from_marker(value: Any) -> Any:
    """``value`` with every marker made again (recursively)."""
    if isinstance(value, dict):
        kind = value.get(KEY)
        if kind == "any":
            return _any_class(value["ne"], value["eq"], value["hashable"])(value["value"])
        if kind == "flexible":
            return FlexibleInputs(from_marker(value["any"]), from_marker(value["items"]))
        return {k: from_marker(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(from_marker(v) for v in value)
    if isinstance(value, list):
        return [from_marker(v) for v in value]
    return value


def plain(value: Any, where: str) -> Any:
    """Metadata as plain values, the two shapes above as markers; anything else becomes its
    ``str`` (logged), since the other side only needs to show and validate it."""
    marker = any_type_of(value)
    if marker is not None:
        return marker
    flexible = flexible_of(value)
    if flexible is not None:
        spec, items = flexible
        return {
            KEY: "flexible",
            "any": plain(spec, where),
            "items": plain(items, where),
        }
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return tuple(plain(v, where) for v in value)
    if isinstance(value, list):
        return [plain(v, where) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v, where) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return [plain(v, where) for v in value]
    log.warning(
        "%s: %r is not plain data; the other side sees its text", where, type(value).__name__
    )
    return str(value)

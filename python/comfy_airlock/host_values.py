"""Objects of ComfyUI's process inside an isolated node's inputs (ADR 0064).

ComfyUI's own nodes put objects that live in ComfyUI's process inside the values they make:
Apply ControlNet puts its ControlNet in each CONDITIONING entry (``control``), the hook
nodes a ``HookGroup`` (``hooks``), Create Hook Keyframe makes a ``HookKeyframeGroup``. A
pack's node that combines, masks, schedules or switches such values passes those objects on
without looking inside. They cannot cross (a model's weights, ComfyUI's code), and need not:
the worker gets a :class:`HostValue` in their place, and when the node's result carries one
back, ComfyUI gets its own object again, the same object. The mirror of ADR 0023, where a
pack's objects stay in its worker.

- **Host**: :func:`hold` (the inputs, with each object that cannot cross, at any depth of
  their lists, tuples and dicts, held for the call and its reference in its place) and
  :func:`let_go` once the call returned. A model given as a whole input is refused before
  the call instead (``host/proxy.py``): a node given a model would use it.
- **Worker**: :class:`HostValue`. Reading it (an attribute, a call) fails with an error that
  names the object's class and says where it lives; its ``repr`` says so too.
- A reference lives for one call: a node that kept one and returns it in a later call gets an
  error that says so.
"""

from __future__ import annotations

import itertools
import secrets
import sys
import threading
from collections.abc import Collection
from typing import Any

from comfy_airlock import pickling, values

CODEC = "airlock.host-value"
_MAX_DEPTH = 8
_PLAIN = frozenset((bool, int, float, str, bytes))


class HostValueError(TypeError):
    """An object of ComfyUI's process was used where it does not live."""


def _short(type_name: str) -> str:
    return type_name.rsplit(".", 1)[-1]


# --- host side ------------------------------------------------------------------------------

_TOKEN = secrets.token_hex(8)
_HELD: dict[int, Any] = {}
_IDS = itertools.count(1)
_LOCK = threading.Lock()


class HostRef:
    """What an input carries in place of a held object (crosses as its reference)."""

    __slots__ = ("payload",)

    def __init__(self, payload: tuple[str, int, str]) -> None:
        self.payload = payload


def _held_ref(obj: Any, held: list[int]) -> HostRef:
    t = type(obj)
    with _LOCK:
        n = next(_IDS)
        _HELD[n] = obj
    held.append(n)
    return HostRef((_TOKEN, n, f"{t.__module__}.{t.__qualname__}"))


def _sub(value: Any, held: list[int], pickled: Collection[str], depth: int) -> Any:
    if value is None or type(value) in _PLAIN:
        return value
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):  # most inputs: asked first
        return value
    named = isinstance(value, tuple) and hasattr(value, "_fields")
    if depth < _MAX_DEPTH and not named:
        if isinstance(value, (list, tuple)):
            items = [_sub(v, held, pickled, depth + 1) for v in value]
            if all(a is b for a, b in zip(items, value, strict=True)):
                return value  # nothing held below: the value as it was, not a copy
            return items if isinstance(value, list) else tuple(items)
        if isinstance(value, dict):
            pairs = {k: _sub(v, held, pickled, depth + 1) for k, v in value.items()}
            if all(pairs[k] is v for k, v in value.items()):
                return value
            return pairs
    if values.crosses(value) or (pickled and pickling.type_name(type(value)) in pickled):
        return value
    return _held_ref(value, held)


def hold(kwargs: dict[str, Any], pickled: Collection[str] = ()) -> tuple[dict[str, Any], list[int]]:
    """``kwargs`` with every object that cannot cross held here, its reference in its place,
    and the ids held (for :func:`let_go`). ``pickled``: the type names the pack's airlock.toml
    lists in ``pickle``, which cross by pickle (the policy applies around the call itself)."""
    held: list[int] = []
    out = {name: _sub(value, held, pickled, 0) for name, value in kwargs.items()}
    return out, held


def let_go(held: list[int]) -> None:
    with _LOCK:
        for n in held:
            _HELD.pop(n, None)


def resolve(payload: Any) -> Any:
    """The object a reference names, while its call runs (the codec's decode on the host)."""
    token, n, type_name = payload[0], payload[1], str(payload[2])
    with _LOCK:
        if token == _TOKEN and n in _HELD:
            return _HELD[n]
    raise HostValueError(
        f"a {_short(type_name)} of ComfyUI's process came back from an isolated pack after "
        "the call it was given to: a node may pass such an object on in its result, not keep "
        "it for a later call"
    )


def held_count() -> int:
    with _LOCK:
        return len(_HELD)


def install_host() -> None:
    values.register_codec(CODEC, HostRef, lambda r: r.payload, resolve)


# --- worker side ----------------------------------------------------------------------------


class HostValue:
    """An object of ComfyUI's process, in a worker: it can be passed on, not used."""

    __slots__ = ("_payload",)

    def __init__(self, payload: Any) -> None:
        self._payload = (str(payload[0]), int(payload[1]), str(payload[2]))

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(self._where(f"its attribute {name!r} was read"))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise HostValueError(self._where("it was called"))

    def __repr__(self) -> str:
        return f"<{_short(self._payload[2])} of ComfyUI's process>"

    # A copy of a value that holds it (a deep copy of a conditioning) keeps the reference: the
    # object lives in ComfyUI's process, and nothing here could copy it.
    def __copy__(self) -> HostValue:
        return self

    def __deepcopy__(self, memo: Any) -> HostValue:
        return self

    def __reduce__(self) -> Any:
        raise HostValueError(self._where("it was pickled"))

    def _where(self, what: str) -> str:
        return (
            f"a {_short(self._payload[2])} of ComfyUI's process was used inside an isolated "
            f"pack ({what}): ComfyUI's models and objects stay in ComfyUI's process; the "
            "pack's node can pass it on in its result, not use it. Run the pack from "
            "custom_nodes/ if its node needs it"
        )


def install_worker() -> None:
    values.register_codec(CODEC, HostValue, lambda v: v._payload, HostValue)

"""Values that stay in their pack's worker (ADR 0023).

A pack's nodes pass each other objects of the pack's own classes (a weights schedule, a
keyframe group, a detector's segments as named tuples) and model objects. Such a value cannot
cross into ComfyUI's process: there is no codec for it, and pickling it would mean running the
pack's code in ComfyUI. But it does not need to cross: its consumer is another node of the
same pack, in the same worker. So the worker keeps it, and ComfyUI holds a
:class:`PackValue` in its place — a reference it caches, passes on and lets go of like any
output. When a node of the same pack gets that reference as an input, its worker gets the
original object back, identical (not a copy).

- **Worker**: :func:`keep_unsendable` on each node's result (a value that cannot cross is
  kept, its reference goes instead) and :func:`resolve` (the codec's decode).
- **Host**: :class:`PackValue`, and :func:`check_inputs` / :func:`claim` /
  :func:`pending_releases` used by the proxies around each node call. A reference that
  ComfyUI drops (its cache let go of the output) is released in the worker with the next call
  to that pack.
- A reference given to a node of ComfyUI or of another pack fails with an error that names the
  value's type, its pack and why; ``str()`` of it is the object's ``repr`` as the worker saw
  it (a display node shows what it would natively).
- A worker that restarted has lost its values: a reference from an earlier worker fails with
  an error that says so (ComfyUI re-runs the producing node after a cache clear).
"""

from __future__ import annotations

import itertools
import secrets
import threading
import weakref
from collections import defaultdict
from typing import Any

from comfy_airlock import values

CODEC = "airlock.pack-value"
_TEXT_LIMIT = 4096


class PackValueError(TypeError):
    """A pack's value was used where it does not live (the message says where it does)."""


def type_name(obj: Any) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def text_of(obj: Any) -> str:
    """The ``repr`` a display shows: the object's own when its class has one (bounded), else
    ``<QualName object>`` (no address: it would mean nothing in another process)."""
    t = type(obj)
    if t.__repr__ is object.__repr__:
        return f"<{t.__qualname__} object>"
    try:
        text = repr(obj)
    except Exception:
        return f"<{t.__qualname__} object>"
    return text if len(text) <= _TEXT_LIMIT else text[: _TEXT_LIMIT - 3] + "..."


# --- worker side ---------------------------------------------------------------------------

_TOKEN = secrets.token_hex(8)  # this process: a value of an earlier worker is told apart
_KEPT: dict[int, Any] = {}
_IDS = itertools.count(1)
_KEPT_LOCK = threading.Lock()
_MAX_DEPTH = 32


class Kept:
    """What a node's result carries in place of a kept object (crosses as its reference)."""

    __slots__ = ("payload",)

    def __init__(self, payload: tuple[str, int, str, str]) -> None:
        self.payload = payload


def keep(obj: Any) -> Kept:
    """Keeps ``obj`` in this worker, for as long as ComfyUI holds its reference."""
    with _KEPT_LOCK:
        n = next(_IDS)
        _KEPT[n] = obj
    return Kept((_TOKEN, n, type_name(obj), text_of(obj)))


def keep_unsendable(value: Any, depth: int = 0) -> Any:
    """A node's result with every value that cannot cross (no codec, not listed in
    ``pickle``, not a tensor, array or builtin) kept here and replaced by its reference;
    named tuples are kept whole (as plain tuples they would lose their fields)."""
    if value is None or type(value) in (bool, int, float, str, bytes) or values.by_codec(value):
        return value
    named = isinstance(value, tuple) and hasattr(value, "_fields")
    if depth < _MAX_DEPTH and not named:
        # Containers cross as their base type (the core sends a subclass so too).
        if isinstance(value, list):
            return [keep_unsendable(v, depth + 1) for v in value]
        if isinstance(value, tuple):
            return tuple(keep_unsendable(v, depth + 1) for v in value)
        if isinstance(value, dict):
            return {k: keep_unsendable(v, depth + 1) for k, v in value.items()}
    return value if not named and values.crosses(value) else keep(value)


def resolve(payload: Any) -> Any:
    """The object a reference names, if this worker holds it."""
    token, n = payload[0], payload[1]
    what = str(payload[2]).rsplit(".", 1)[-1] if len(payload) > 2 else "value"
    if token != _TOKEN:
        raise PackValueError(
            f"a {what} made by an earlier worker of this pack (it restarted since, and its "
            "values were lost with it): run the node that makes it again"
        )
    with _KEPT_LOCK:
        if n not in _KEPT:
            raise PackValueError(f"a {what} this worker no longer holds (released)")
        return _KEPT[n]


def release(token: str, ids: list[int]) -> int:
    """Drops the values ComfyUI let go of; returns how many this worker held."""
    if token != _TOKEN:
        return 0
    with _KEPT_LOCK:
        return sum(1 for n in ids if _KEPT.pop(n, None) is not None)


def held() -> int:
    with _KEPT_LOCK:
        return len(_KEPT)


def install_worker() -> None:
    values.register_codec(CODEC, Kept, lambda k: k.payload, resolve)


# --- host side ------------------------------------------------------------------------------

_PENDING: dict[str, list[tuple[str, int]]] = defaultdict(list)
_PENDING_LOCK = threading.Lock()


def _forget(pack: str | None, token: str, n: int) -> None:
    if pack is not None:
        with _PENDING_LOCK:
            _PENDING[pack].append((token, n))


class PackValue:
    """ComfyUI's handle on a value that lives in an isolated pack's worker."""

    __slots__ = ("__weakref__", "_finalizer", "_id", "_pack", "_text", "_token", "_type")

    def __init__(self, token: str, n: int, type_: str, text: str) -> None:
        self._pack: str | None = None
        self._token, self._id, self._type, self._text = token, n, type_, text
        self._finalizer: Any = None

    @classmethod
    def from_payload(cls, payload: Any) -> PackValue:
        token, n, type_, text = payload
        return cls(str(token), int(n), str(type_), str(text))

    def _claim(self, pack: str) -> None:
        """Stamped by the host with the pack whose call returned it (never the worker's
        word), and released in that pack's worker once ComfyUI lets go of it."""
        if self._pack is None:
            self._pack = pack
            self._finalizer = weakref.finalize(self, _forget, pack, self._token, self._id)

    @property
    def airlock_pack(self) -> str | None:
        return self._pack

    @property
    def airlock_type(self) -> str:
        return self._type

    def payload(self) -> tuple[str, int, str]:
        return (self._token, self._id, self._type)

    def __repr__(self) -> str:
        return self._text

    __str__ = __repr__

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(self._where(f"its attribute {name!r} was read"))

    def __reduce__(self) -> Any:
        raise PackValueError(self._where("it was copied or pickled"))

    def _where(self, what: str) -> str:
        short = self._type.rsplit(".", 1)[-1]
        return (
            f"a {short} of the isolated pack {self._pack!r} was used outside it ({what}): it "
            f"lives in that pack's worker, so only nodes of the pack {self._pack!r} can use it"
        )


def install_host() -> None:
    values.register_codec(CODEC, PackValue, PackValue.payload, PackValue.from_payload)


def _walk(value: Any, depth: int = 0):
    if isinstance(value, PackValue):
        yield value
    elif depth < 8 and isinstance(value, (list, tuple)):
        for v in value:
            yield from _walk(v, depth + 1)
    elif depth < 8 and isinstance(value, dict):
        for v in value.values():
            yield from _walk(v, depth + 1)


def check_inputs(pack: str, node_id: str, kwargs: dict[str, Any]) -> None:
    """A reference may go only to a node of its own pack; anything else is an error naming
    both, raised before the call."""
    for name, value in kwargs.items():
        for ref in _walk(value):
            if ref.airlock_pack != pack:
                raise PackValueError(
                    f"[comfy-airlock] node {node_id!r} of isolated pack {pack!r}: input {name!r} "
                    f"is {ref._where('given to a node of another pack')[2:]}"
                )


def claim(pack: str, out: Any) -> Any:
    for ref in _walk(out):
        ref._claim(pack)
    return out


def pending_releases(pack: str) -> dict[str, list[int]]:
    """The references of ``pack`` that ComfyUI let go of, by worker token (taken)."""
    with _PENDING_LOCK:
        items = _PENDING.pop(pack, [])
    out: dict[str, list[int]] = defaultdict(list)
    for token, n in items:
        out[token].append(n)
    return dict(out)

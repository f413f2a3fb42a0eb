"""Objects of ComfyUI's process inside an isolated node's inputs (ADR 0064).

ComfyUI's own nodes put objects that live in ComfyUI's process inside the values they make:
Apply ControlNet puts its ControlNet in each CONDITIONING entry (``control``), the hook
nodes a ``HookGroup`` (``hooks``), Create Hook Keyframe makes a ``HookKeyframeGroup``. A
pack's node that combines, masks, schedules or switches such values passes those objects on
without looking inside. They cannot cross (a model's weights, ComfyUI's code), and need not:
the worker gets a :class:`HostValue` in their place, and when the node's result carries one
back, ComfyUI gets its own object again, the same object. The mirror of ADR 0023, where a
pack's objects stay in its worker.

- **Host**: :func:`holding` around a node call: the encoder, where it meets an object that
  cannot cross at any depth of the inputs, holds it here and sends its reference instead;
  the call's result brings references back as the objects. A model given as a whole input
  is refused before the call instead (``host/proxy.py``): a node given a model would use it.
- **Worker**: :class:`HostValue`. Reading it (an attribute, a call) fails with an error that
  names the object's class and says where it lives; its ``repr`` says so too.
- A reference lives for one call: a node that kept one and returns it in a later call gets an
  error that says so.
"""

from __future__ import annotations

import contextlib
import itertools
import secrets
import threading
from collections.abc import Iterator
from typing import Any

from comfy_airlock import values

CODEC = "airlock.host-value"


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
    """What is sent in place of a held object (crosses as its reference)."""

    __slots__ = ("payload",)

    def __init__(self, payload: tuple[str, int, str]) -> None:
        self.payload = payload


@contextlib.contextmanager
def holding() -> Iterator[None]:
    """Around sending a node's inputs and receiving its result: each object the encoder finds
    that nothing can send (no codec, not in the pack's ``pickle``, not a tensor, array or
    builtin) is held here and its reference sent instead; all are let go at the end. The
    encoder's own walk finds them: inputs without such objects cost nothing more."""
    held: list[int] = []

    def stand_in(obj: Any) -> HostRef:
        t = type(obj)
        with _LOCK:
            n = next(_IDS)
            _HELD[n] = obj
        held.append(n)
        return HostRef((_TOKEN, n, f"{t.__module__}.{t.__qualname__}"))

    try:
        with values.sending_stand_ins(stand_in):
            yield
    finally:
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

"""Types and functions for the pickle opt-in tests (imported by the host test and the worker).

``Point`` is the listed type; ``Secret`` is never listed. ``Forged`` lets a test play a
compromised peer: it sends bytes of its choosing under the pickle codec's name, the way a
worker (or host) that no longer plays by the rules could.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from typing import Any

from comfy_airlock import pickling, values


@dataclass
class Point:
    x: Any
    y: Any


@dataclass
class Secret:
    value: str = "s3cret"


class Forged:
    def __init__(self, name: str, data: bytes) -> None:
        self.name = name
        self.data = data


def forge() -> None:
    """Makes ``Forged`` values go out as pickles with the chosen bytes (in this process)."""
    codec = values.Codec(pickling.CODEC, Forged, lambda f: (f.name, f.data), lambda p: p)
    values._BY_TYPE[Forged] = codec


def unforge() -> None:
    values._BY_TYPE.pop(Forged, None)


class _System:
    """Unpickling this runs ``os.system(command)``."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def evil_pickle(marker: str) -> bytes:
    """A pickle that, loaded by a plain ``pickle.loads``, creates ``marker``."""
    return pickle.dumps(_System(f"touch {marker}"))


def make_point(x: Any, y: Any) -> Point:
    return Point(x, y)


def point_sum(p: Point) -> Any:
    assert type(p) is Point
    return p.x + p.y


def echo(value: Any) -> Any:
    return value


def make_secret() -> Secret:
    return Secret()


def point_holding_secret() -> Point:
    return Point(Secret(), 1)


def send_forged(name: str, data: bytes) -> Any:
    forge()
    return Forged(name, data)


def receive(value: Any) -> str:
    return type(value).__name__


def exists(path: str) -> bool:
    return os.path.exists(path)

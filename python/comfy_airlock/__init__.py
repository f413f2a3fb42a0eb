"""comfy-airlock: process isolation for ComfyUI custom node packs.

The core is the Rust extension ``comfy_airlock._native``; this package re-exports it with a
thin, typed Python layer. Importing it installs the value codec (tensors, arrays, codecs).
"""

from comfy_airlock import values as _values  # installs the codec hooks
from comfy_airlock._native import (
    PROTOCOL_VERSION,
    AirlockError,
    ConfigError,
    EnvError,
    EnvMissing,
    HandshakeError,
    ProtocolError,
    RemoteError,
    SpawnError,
    WorkerDied,
)
from comfy_airlock.supervisor import Worker
from comfy_airlock.values import Codec, register_codec


def register_nodes(path=None):
    """Isolates the calling pack; see :func:`comfy_airlock.host.register_nodes`."""
    import inspect

    from comfy_airlock.host import register_nodes as _register

    if path is None:
        path = inspect.stack()[1].filename
    return _register(path)


__all__ = [
    "PROTOCOL_VERSION",
    "AirlockError",
    "Codec",
    "ConfigError",
    "EnvError",
    "EnvMissing",
    "HandshakeError",
    "ProtocolError",
    "RemoteError",
    "SpawnError",
    "Worker",
    "WorkerDied",
    "register_codec",
    "register_nodes",
]

del _values

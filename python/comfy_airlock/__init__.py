"""comfy-airlock: process isolation for ComfyUI custom node packs.

The core is the Rust extension ``comfy_airlock._native``; this package re-exports it with a
thin, typed Python layer. Importing it installs the value codec (tensors, arrays, codecs).
:class:`Worker` and :data:`INHERIT_ENV` (the host's side) are imported on first use: a worker
imports this package too, before anything else, and its start is on every first call's path.
"""

from typing import TYPE_CHECKING

from comfy_airlock import values as _values  # installs the codec hooks
from comfy_airlock._native import (
    PROTOCOL_VERSION,
    AirlockError,
    CallInterrupted,
    ConfigError,
    DeadlineExceeded,
    EnvError,
    EnvMissing,
    HandshakeError,
    ProtocolError,
    RemoteError,
    SandboxError,
    SpawnError,
    ValueTooLarge,
    WorkerDied,
)
from comfy_airlock.values import Codec, register_codec

if TYPE_CHECKING:
    from comfy_airlock.supervisor import Worker
    from comfy_airlock.worker_env import INHERIT_ENV


def __getattr__(name):
    if name == "Worker":
        from comfy_airlock.supervisor import Worker

        return Worker
    if name == "INHERIT_ENV":
        from comfy_airlock.worker_env import INHERIT_ENV

        return INHERIT_ENV
    raise AttributeError(f"module 'comfy_airlock' has no attribute {name!r}")


def register_model(module, *, name=None, device=None):
    """Inside an isolated pack's worker: makes the pack's own ``torch.nn.Module`` visible to
    (and evictable by) ComfyUI's memory manager in the host. Elsewhere: does nothing and
    returns None, so a pack can call it unconditionally."""
    from comfy_airlock import settings

    if not settings.get().worker:
        return None
    from comfy_airlock.worker.models import register_model as _register

    return _register(module, name=name, device=device)


def unregister_model(module):
    """Undoes :func:`register_model` (the model leaves the host's ledger)."""
    from comfy_airlock import settings

    if not settings.get().worker:
        return
    from comfy_airlock.worker.models import unregister_model as _unregister

    _unregister(module)


def register_nodes(path=None):
    """Isolates the pack at ``path`` (its ``__init__.py`` or folder; default: the pack being
    imported, found in ``sys.modules`` with no frame read, ADR 0033); see
    :func:`comfy_airlock.host.register_nodes`."""
    from comfy_airlock.host import register_nodes as _register

    if path is None:
        import os

        from comfy_airlock.compat import importing

        def is_pack(folder):
            return os.path.isfile(os.path.join(folder, "airlock.toml")) or os.path.isfile(
                os.path.join(folder, "comfy-env.toml")
            )

        found = importing.importing_pack(is_pack)
        if found is None:
            raise RuntimeError(
                "comfy_airlock.register_nodes() found no pack being imported: pass the pack's "
                "__file__, or call it from the __init__.py of a pack with an airlock.toml"
            )
        path = found[1]
    return _register(path)


__all__ = [
    "INHERIT_ENV",
    "PROTOCOL_VERSION",
    "AirlockError",
    "CallInterrupted",
    "Codec",
    "ConfigError",
    "DeadlineExceeded",
    "EnvError",
    "EnvMissing",
    "HandshakeError",
    "ProtocolError",
    "RemoteError",
    "SandboxError",
    "SpawnError",
    "ValueTooLarge",
    "Worker",
    "WorkerDied",
    "register_codec",
    "register_model",
    "register_nodes",
    "unregister_model",
]

del _values

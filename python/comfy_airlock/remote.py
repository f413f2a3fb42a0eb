"""What a worker reports besides values, as the host takes it in: its exceptions, re-created
as the host's own classes where that is safe, and its output and log records, forwarded to the
host's ``logging``. Installed as core hooks by :mod:`comfy_airlock.values`."""

from __future__ import annotations

import builtins
import inspect
import logging
import sys
from typing import Any

from comfy_airlock import _native

# --- exceptions -----------------------------------------------------------------------------

# Exception classes are looked up only in these packages, and only among the modules the host
# has already imported: the peer never makes the host import anything.
_EXCEPTION_ROOTS = {"builtins", "torch", "numpy", "comfy", "comfy_extras", "comfy_api"}


class RemoteTraceback(Exception):
    """The worker's traceback, attached as ``__cause__`` of a re-raised exception."""

    def __str__(self) -> str:
        return "\n" + str(self.args[0]) if self.args else ""


def _exception_class(module: str, qualname: str) -> type[Exception] | None:
    """The host's class ``module.qualname``, found without running any code: the module must be
    in ``sys.modules`` already, and each step of the qualname is read from the namespace itself
    (``inspect.getattr_static``), never through ``getattr``. torch's and numpy's module-level
    ``__getattr__`` import submodules on first access (``torch._dynamo``, ``numpy.testing``), so
    a peer naming ``torch`` / ``_dynamo.exc.X`` would otherwise make the host import them."""
    if module.split(".")[0] not in _EXCEPTION_ROOTS:
        return None
    obj: Any = builtins if module == "builtins" else sys.modules.get(module)
    for part in qualname.split("."):
        if obj is None or not part.isidentifier():  # "<locals>" and the like: not reachable
            return None
        obj = inspect.getattr_static(obj, part, None)
    # Only Exception subclasses: a worker's SystemExit must not stop the host. ComfyUI's own
    # interrupt is a BaseException: a node raises it to stop the prompt (a "queue stop" node),
    # and ComfyUI ends the prompt as interrupted, not failed.
    if isinstance(obj, type) and (issubclass(obj, Exception) or (module, qualname) in _INTERRUPTS):
        return obj
    return None


_INTERRUPTS = {("comfy.model_management", "InterruptProcessingException")}


def make_exception(worker, module, qualname, message, args, traceback):
    cls = _exception_class(module, qualname)
    exc: BaseException | None = None
    if cls is not None:
        try:
            exc = cls(*args) if args else cls(message)
        except Exception:
            exc = None
    if exc is None:
        exc = _native.RemoteError(f"{module}.{qualname}: {message}")
    exc.remote_type = f"{module}.{qualname}"  # type: ignore[attr-defined]
    exc.remote_traceback = traceback  # type: ignore[attr-defined]
    exc.worker = worker  # type: ignore[attr-defined]
    exc.__cause__ = RemoteTraceback(traceback)
    if hasattr(exc, "add_note"):
        exc.add_note(f"(raised in comfy-airlock worker {worker!r}; its traceback is above)")
    return exc


# --- logs -----------------------------------------------------------------------------------


# A worker's records go to one host logger per worker, whatever logger name the record carries:
# that name is the worker's to choose, and every ``logging.getLogger`` name stays in the host's
# logging manager for good (20 000 names were 20 000 loggers). The worker's logger is kept on
# the record (``airlock_logger``) and in the message, so a reader still sees who said what.


def log_line(worker, stream, level, logger, line):
    """Called by the core for each line of a worker's stdout, stderr and log records."""
    # Levels are the worker's too, and a logger caches its answer for every level it is asked.
    level = min(max(level, 1), 100)
    target = logging.getLogger(f"comfy_airlock.worker.{worker}")
    if not target.isEnabledFor(level):
        return
    who = f"{worker}/{logger}" if logger else worker
    extra = {"airlock_worker": worker, "airlock_logger": logger or None, "airlock_stream": stream}
    target.log(level, "[%s] %s", who, line, extra=extra)

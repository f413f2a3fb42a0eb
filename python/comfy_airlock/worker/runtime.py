"""The worker's main loop: connect, then run calls until the host says stop or goes away."""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from comfy_airlock import _native, born_policy, idle_trim, settings
from comfy_airlock import pickling as _pickling
from comfy_airlock import sandbox as _sandbox
from comfy_airlock import values as _values  # noqa: F401  (installs the codec hooks)
from comfy_airlock.worker import interrupts, link, models, on_import, ram
from comfy_airlock.worker.link import ask, emit

__all__ = ["ask", "emit", "main", "serve"]

#: When each step of this worker's start ended (CLOCK_BOOTTIME seconds), for
#: bench/cold_start.py: "interpreter" (our code reached), "imported" (this module), "connected"
#: (the handshake done). Four clock reads; nothing else depends on them.
START_MARKS: dict[str, float] = {}


def _mark(step: str) -> None:
    START_MARKS[step] = time.clock_gettime(time.CLOCK_BOOTTIME)


def _version(dist: str) -> str | None:
    """The installed version of ``dist`` as import would find it: the first ``dist-*.dist-info``
    on ``sys.path`` (a directory listing, where ``importlib.metadata`` imports and parses far
    more, on every start), else ``importlib.metadata``'s answer."""
    prefix = dist.lower().replace("-", "_") + "-"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info") and name.lower().startswith(prefix):
                return name[len(prefix) : -len(".dist-info")]
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


class _RecordPipe(logging.Handler):
    """Sends logging records to the host on their own pipe: ``level \\t logger \\t message``."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._out = os.fdopen(fd, "w", buffering=1, encoding="utf-8", errors="replace")

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = self.format(record).replace("\n", "\0")
            self._out.write(f"{record.levelno}\t{record.name}\t{msg}\n")
        except Exception:
            self.handleError(record)


def _setup_logging() -> None:
    knobs = settings.get()
    if knobs.log_fd is None:
        return
    root = logging.getLogger()
    root.handlers[:] = [_RecordPipe(knobs.log_fd)]
    root.setLevel(knobs.log_level)


def _resolve(target: str) -> Callable[..., Any]:
    """The callable for ``target``, wrapped so that what the worker holds after the call
    reaches the host's ledger before the reply (see :mod:`comfy_airlock.worker.models`). The
    wrapper runs on every call: it costs a few attribute reads unless the call changed what
    the worker holds."""
    fn = _lookup(target)

    active, begin, end, enter, leave = (
        models.active,
        models.begin_call,
        models.end_call,
        ram.enter,
        ram.leave,
    )

    def call(*args: Any, **kwargs: Any) -> Any:
        tracked = begin()
        enter()
        try:
            return fn(*args, **kwargs)
        finally:
            leave()
            # A call may register the first model: then it reports too.
            report = end() if tracked or active() else None
            lk = link.LINK
            if lk is not None and report is not None:
                try:
                    lk.emit("telemetry", report)
                except Exception as e:  # never fail a call over its report
                    logging.getLogger("comfy_airlock.worker").warning("report not sent: %s", e)

    return call


def _lookup(target: str) -> Callable[..., Any]:
    module, sep, qualname = target.partition(":")
    if not sep or not module or not qualname:
        raise ValueError(f"call target {target!r} is not of the form 'module:qualname'")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"call target {target!r} is not callable")
    return obj


def _describe(exc: BaseException, tb: Any) -> tuple[str, str, str, tuple[Any, ...], str]:
    """What the host needs to re-raise ``exc``: class, message, args, traceback."""
    t = type(exc)
    try:
        message = str(exc)
    except Exception:
        message = f"<unprintable {t.__qualname__}>"
    text = "".join(traceback.format_exception(t, exc, tb))
    if sys.version_info < (3, 11):  # 3.11 prints an error's notes itself
        text += "".join(f"{note}\n" for note in getattr(exc, "__notes__", None) or ())
    args = tuple(exc.args)
    if isinstance(exc, OSError) and len(args) == 2 and exc.filename is not None:
        # The file names are not in args: OSError(errno, strerror, filename, winerror, filename2).
        args = (*args, exc.filename, None, exc.filename2)
    return t.__module__, t.__qualname__, message, args, text


def serve(worker_link: Any) -> None:
    """Runs calls until the host says stop (the loop itself is in the core); the route lane's
    calls on a thread of their own meanwhile."""
    link.install(worker_link)
    models.install(worker_link)
    interrupts.install(worker_link)
    idle_trim.register(worker_link, worker=True, tick=models.refresh)
    if born_policy.enable(worker_link):
        on_import.after_import("numpy", born_policy.numpy_births)
    route = getattr(worker_link, "route", None)
    if route is not None:
        threading.Thread(
            target=_serve_routes, args=(route,), name="airlock-routes", daemon=True
        ).start()
    worker_link.serve(_resolve, _describe)


def _serve_routes(route_link: Any) -> None:
    """The route lane's loop (ADR 0055): the pack's HTTP requests, answered while a node runs
    on the main thread, as ComfyUI's server answers them while its prompt worker runs one.
    Its calls report no memory (a route handler is not a node): plain lookups. Ends with the
    process: the host stops a worker on its call lane."""
    link.install_here(route_link)
    try:
        route_link.serve(_lookup, _describe)
    except Exception as e:  # the host went away or broke the lane: the main loop hears too
        logging.getLogger("comfy_airlock.worker").debug("route lane ended: %s", e)


def main() -> None:
    _mark("imported")
    born_policy.restore()
    token = sys.stdin.readline().strip()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    _setup_logging()
    _pickling.install_from_env()
    # While this is the only thread, before ComfyUI or the pack is imported.
    _sandbox.apply_from_env()
    for module in settings.get().preload:
        importlib.import_module(module)
    socket = settings.get().socket
    if socket is None:
        raise _native.AirlockError("no socket to connect to: this is not a worker the host started")
    worker_link = _native.connect(
        socket,
        token,
        sys.version.split()[0],
        torch=_version("torch"),
        numpy=_version("numpy"),
    )
    _mark("connected")
    serve(worker_link)
    # Orderly stop: flush what we logged, then skip interpreter teardown (torch's can take
    # most of a second, and the host is waiting for us to exit).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

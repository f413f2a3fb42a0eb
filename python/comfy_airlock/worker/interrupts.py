"""ComfyUI's cancel inside a worker.

A node stops on a cancel only where it asks: ``comfy.model_management`` 's
``throw_exception_if_processing_interrupted()`` and ``processing_interrupted()``, called by
samplers, progress bars and well-behaved packs. Both read a module global under
``interrupt_processing_mutex``. The worker's own copy of that module (the worker imports the
same ComfyUI tree, never the host's process) gets a stand-in for the mutex: whenever a check
takes it, it folds in the flag the host raised in the worker's signal page. So every check a
node makes sees the host's cancel at once, including checks from functions a pack imported by
name, with no thread, no message and no lock beyond the one the check already takes. The
stand-in goes on the moment the module is imported (:mod:`comfy_airlock.worker.on_import`),
so a node that imports it inside its function checks against it in that same call.

A node that never checks is stopped by the host's escalation instead: SIGINT, which the
handler below turns into ComfyUI's own ``InterruptProcessingException`` in the running node,
then SIGKILL (see ``docs/reliability.md``).

The other way round, a node that raises the interrupt itself (``nodes.interrupt_processing()``)
has the host raise ComfyUI's flag before its call returns (:func:`end_call`).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import Any

from comfy_airlock.worker.on_import import after_import

_link: Any = None


class _Gate:
    """Stands in for ``interrupt_processing_mutex`` (a ``threading.RLock``)."""

    def __init__(self, lock: Any, mm: Any, link: Any) -> None:
        self._lock = lock
        self._mm = mm
        self._link = link

    def __enter__(self) -> _Gate:
        self._lock.acquire()
        self._fold()
        return self

    def __exit__(self, *exc: object) -> bool:
        self._lock.release()
        return False

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        got = self._lock.acquire(*args, **kwargs)
        if got:
            self._fold()
        return got

    def release(self) -> None:
        self._lock.release()

    def _fold(self) -> None:
        if self._link.take_interrupt():
            self._mm.interrupt_processing = True


def install(link: Any) -> None:
    """Called once the worker is connected."""
    global _link
    _link = link
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)
    after_import("comfy.model_management", _attach)


def attach_comfy() -> None:
    """Puts the gate on the worker's ``comfy.model_management`` if it is imported and has none
    (again at every node call, in case a pack replaced the module's lock)."""
    mm = sys.modules.get("comfy.model_management")
    if mm is not None:
        _attach(mm)


def _attach(mm: Any) -> None:
    if _link is None:
        return
    lock = getattr(mm, "interrupt_processing_mutex", None)
    if lock is None or isinstance(lock, _Gate):
        return
    mm.interrupt_processing_mutex = _Gate(lock, mm, _link)


def begin_call() -> None:
    """A call starts clean: a cancel meant for an earlier call is not this one's (upstream's
    executor resets the flag at each prompt for the same reason)."""
    attach_comfy()
    mm = sys.modules.get("comfy.model_management")
    if mm is not None and hasattr(mm, "interrupt_processing"):
        mm.interrupt_processing = False


def end_call() -> None:
    """A node that raised ComfyUI's interrupt itself stops the prompt, as natively: mxToolkit's
    "Stop" node calls ``nodes.interrupt_processing()`` and returns, and ComfyUI's executor then
    stops before the next node. In the worker that call sets the worker's flag only, so the host
    is asked to raise its own (ADR 0051). The host's cancel folded in here and not consumed by a
    check asks it too: its flag is up already, and raising it again changes nothing."""
    mm = sys.modules.get("comfy.model_management")
    if mm is None or not getattr(mm, "interrupt_processing", False):
        return
    if _link is None or not getattr(_link, "in_call", False):
        return
    try:
        _link.ask("interrupt?", None)
    except Exception as e:  # the node's result still goes back
        logging.getLogger("comfy_airlock.worker").warning("interrupt not passed on: %s", e)


def _on_sigint(signum: int, frame: Any) -> None:
    # The host's second step: the node did not check in time. Outside a call, nothing runs
    # that could be stopped.
    if _link is None or not _link.in_call:
        return
    mm = sys.modules.get("comfy.model_management")
    exc = getattr(mm, "InterruptProcessingException", None)
    if exc is not None:
        raise exc("interrupted by comfy-airlock: SIGINT, the node did not check in time")
    raise KeyboardInterrupt("interrupted by comfy-airlock: SIGINT")

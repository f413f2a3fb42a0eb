"""The panel's two actions on a pack's worker: restart it, release its models.

Both run on a thread of the panel's (routes.py), never on ComfyUI's execution thread, so like
the heartbeat they change only numbers and flags of stand-ins, never ComfyUI's list: the
entries of a killed generation or of released models leave ``current_loaded_models`` at the
next call boundary, on ComfyUI's thread, as every other change of the list does (bridge.py).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from comfy_airlock.host import loader
from comfy_airlock.host.memory.ledger import LEDGER
from comfy_airlock.host.pack import IsolatedPack

log = logging.getLogger("comfy_airlock")

# One action at a time: a second click while a worker restarts is answered, not queued.
_ACTING = threading.Lock()


class ActionError(Exception):
    """An action that cannot be done, with the HTTP status that says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _pack(name: str) -> IsolatedPack:
    pack = loader.pack(name)
    if pack is None:
        raise ActionError(404, f"pack {name!r} has no worker: it is not loaded (its row says why)")
    return pack


def _one_at_a_time(name: str) -> None:
    if not _ACTING.acquire(blocking=False):
        raise ActionError(409, f"pack {name!r}: another panel action is running; try again")


def restart(name: str) -> dict[str, Any]:
    """Kills the pack's worker and starts its next generation now. Refused while one of its
    nodes runs (ComfyUI's Cancel stops that; a hung worker is replaced by liveness)."""
    pack = _pack(name)
    _one_at_a_time(name)
    try:
        if pack.busy:
            raise ActionError(
                409,
                f"pack {name!r} is running a node: cancel the prompt first, or restart when "
                "it ends",
            )
        alive = pack.alive()
        worker = pack.worker()  # a pack whose worker never started gets its first one here
        before = worker.generation if alive else None
        if alive:
            worker.kill()
        # Its models went with the process: they hold nothing from now on (numbers only, as
        # the heartbeat does for a dead generation).
        for s in LEDGER.standins(name):
            if s.handle is pack and not pack.alive_generation(s.generation):
                s.gone = True
        if not worker.alive:
            worker.call("os:getpid")  # the next generation, started now rather than at a call
        log.info(
            "[comfy-airlock] pack %r: worker restarted from the panel (generation %s -> %d)",
            name,
            before,
            worker.generation,
        )
        return {"pack": name, "before": before, "generation": worker.generation, "pid": worker.pid}
    finally:
        _ACTING.release()


def release(name: str) -> dict[str, Any]:
    """Unloads every model of the pack's worker that no running node uses, as ComfyUI's own
    unload would (the worker frees them; its report sets the stand-ins to 0 resident)."""
    pack = _pack(name)
    _one_at_a_time(name)
    try:
        released, in_use = [], []
        for s in LEDGER.standins(name):
            if s.handle is not pack or s.gone or s.loaded_size() <= 0:
                continue
            if s.in_use:
                in_use.append(s.model.name)
                continue
            # The stand-in's own command path (as idle release uses): refused for a generation
            # that is gone, 0 bytes on a worker that dies meanwhile, never an exception.
            freed = s.command("unload", 0.0)
            released.append({"model": s.model.name, "freed": freed})
        log.info(
            "[comfy-airlock] pack %r: released from the panel: %s",
            name,
            ", ".join(f"{r['model']} ({r['freed']} bytes)" for r in released) or "nothing",
        )
        return {"pack": name, "released": released, "in_use": in_use}
    finally:
        _ACTING.release()

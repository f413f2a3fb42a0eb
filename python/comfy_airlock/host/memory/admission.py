"""The host's answer to a worker that is about to load (``admit?``) or ran out of memory
(``oom?``): make room across every process on the card, then say how much there is.

Two phases, as docs/adr/0010-arbiter.md and the seed (Part 3) lay down:

1. **Worker models, by our policy** (``evict.py``: the arbiter): idle workers' models first,
   then least recently used, the requester's own last, never one a running node uses; true
   free memory re-read after every step, stopping at the minimum.
2. **The residual, by upstream**: ``free_memory(need + blind_term, device, keep_loaded=<worker
   entries>)``, so every remaining victim is one of the host's own models and upstream's
   feedback loop sees its own progress. The blind term (``comfy_airlock.card``) is the change
   of variables for a host whose free-memory reading is blind to other processes (WDDM): zero
   where the reading is device-wide.

It runs on the thread that waits for the worker's call (ComfyUI's execution thread), so
upstream's ledger is changed only there. Nothing here waits on a call lane: evictions go over
the other workers' control lanes, which never call back into the host. Every answer is logged
on ``comfy_airlock.memory`` (DEBUG) with the answer as the record's ``airlock_admission``.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from comfy_airlock.card import Card, card
from comfy_airlock.host.memory import evict, heartbeat
from comfy_airlock.host.memory.ledger import LEDGER
from comfy_airlock.host.memory.shapes import Admission, AdmitRequest, WorkerHandle
from comfy_airlock.host.memory.standin import StandIn

log = logging.getLogger("comfy_airlock.memory")


def answer(handle: WorkerHandle, topic: str, request: AdmitRequest) -> Admission:
    """Frees room for ``request``. A granted admission leaves a hold of ``need`` bytes that
    later decisions count as taken until the worker says its load is done (:func:`release`),
    or its call ends."""
    need = int(request["need"])
    device = card(str(request["device"]))
    arbiter = evict.arbiter()
    before = device.true_free()
    result: dict[str, Any] = {"topic": topic, "need": need, "free_before": before, "steps": []}
    # Room to spare, counting what earlier admissions hold: the decision evicts nothing and
    # only takes the hold, so the stand-ins are not read.
    short = before - int(arbiter.stats()["held_bytes"]) < need
    cands: list[Any] = []
    if short:
        heartbeat.sync()
        loading = {int(m) for m in request.get("models") or ()}
        cands = evict.candidates(LEDGER, handle, device, loading)
    evicter = evict.evicter(LEDGER)
    outcome = arbiter.free_room(need, cands, device.true_free, evicter, hold=True)
    if cands:
        result["candidates"] = cands  # the snapshot phase one decided on
    result["steps"] = outcome.get("steps", [])
    result["held"] = int(outcome["held"])
    hold = outcome["hold"]
    if hold is None:
        heartbeat.sync()
        # What earlier admissions hold is promised to their loads: upstream frees for it too.
        _upstream_residual(device, need + int(outcome["held"]))
        hold = arbiter.free_room(need, [], device.true_free, evicter, hold=True)["hold"]
    result["free"] = device.true_free()
    result["granted"] = hold is not None
    result["hold"] = hold
    if hold is not None:
        handle.holds.append(hold)
    log.debug(
        "[comfy-airlock] %s for %r: %s",
        topic,
        handle.name,
        "granted" if hold is not None else "refused",
        extra={"airlock_admission": {"pack": handle.name, **result}},
    )
    if not result["granted"]:
        log.info(
            "[comfy-airlock] %s for %r: %d bytes needed, %d free after freeing what could be",
            topic,
            handle.name,
            need,
            result["free"],
        )
    return result  # type: ignore[return-value]


def release(handle: WorkerHandle, holds: list[int] | None = None) -> None:
    """Gives back ``handle``'s admission holds: ``holds`` (the worker's load is done or failed),
    or all of them (its call ended, or its worker died)."""
    mine = handle.holds
    for h in list(mine if holds is None else holds):
        if h in mine:
            mine.remove(h)
            evict.arbiter().release(int(h))


def _upstream_residual(device: Card, need: int) -> None:
    mm = sys.modules["comfy.model_management"]
    keep = [lm for lm in mm.current_loaded_models if isinstance(lm.model, StandIn)]
    mm.free_memory(need + device.blind_term(), device.device, keep_loaded=keep)

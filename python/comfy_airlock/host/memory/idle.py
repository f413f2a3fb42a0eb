"""Idle workers give memory back, on time and under pressure.

A worker that has run no node for the ``idle_release_s`` setting (default 600 s; ``off``
disables) unloads its models from the device: a pack used once an hour should not keep a GPU's
worth of weights between uses. When the device's true free memory drops below the
``pressure_free`` setting (MiB; default 0: off), idle workers' models are released at once,
through the same arbiter as admissions (``evict.py``: single flight, least recently used first,
stopping as soon as the floor is back), without waiting for anyone to ask. See
``comfy_airlock.settings`` for both variables.

Both run on the heartbeat thread. They only send model commands on control lanes (which never
call back into the host) and change stand-ins' numbers; the ledger entries of released models
leave ``current_loaded_models`` at the next call boundary, on ComfyUI's execution thread, as
every other change of the list does. Each release is logged on ``comfy_airlock.memory`` (INFO)
with the release as the record's ``airlock_release``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from comfy_airlock import settings
from comfy_airlock.card import card
from comfy_airlock.host.memory import evict
from comfy_airlock.host.memory.ledger import Ledger

log = logging.getLogger("comfy_airlock.memory")


def release_idle(ledger: Ledger, now: float | None = None) -> list[dict[str, Any]]:
    """One pass of both policies; returns what was released."""
    now = time.monotonic() if now is None else now
    knobs = settings.get()
    after, floor = knobs.idle_release_s, knobs.pressure_free
    released: list[dict[str, Any]] = []
    held = [
        s
        for s in ledger.standins()
        if not s.gone
        and s.loaded_size() > 0
        and s.load_device.type != "cpu"
        and not s.handle.busy
        and not s.in_use
    ]
    if after is not None:
        for s in held:
            if now - s.handle.idle_since >= after:
                freed = s.command("unload", 0.0)
                released.append({"why": "idle", "model": repr(s.model), "freed": freed})
    if floor > 0:
        released += _relieve(ledger, floor)
    for r in released:
        log.info(
            "[comfy-airlock] released %s (%s): %d bytes",
            r["model"],
            r["why"],
            r["freed"],
            extra={"airlock_release": r},
        )
    return released


def _relieve(ledger: Ledger, floor: int) -> list[dict[str, Any]]:
    """Under pressure: idle workers' models go, by the arbiter's policy, until the floor is
    free again."""
    try:
        device = card("cuda:0")
        if device.true_free() >= floor:
            return []
    except Exception as e:  # no device to read: nothing to relieve
        log.debug("no pressure reading: %s", e)
        return []
    cands = [c for c in evict.candidates(ledger, None, device, set()) if c["owner_idle"]]
    if not cands:
        return []
    outcome = evict.arbiter().free_room(floor, cands, device.true_free, evict.evicter(ledger))
    return [
        {"why": "pressure", "model": f"{s['owner']}#{s['model']}", "freed": s["freed"]}
        for s in outcome.get("steps", [])
        if not s.get("refused")
    ]

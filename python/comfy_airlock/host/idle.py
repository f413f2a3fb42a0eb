"""Idle workers give memory back, on time and under pressure.

A worker that has run no node for ``AIRLOCK_IDLE_RELEASE_S`` seconds (default 600; ``off``
disables) unloads its models from the device: a pack used once an hour should not keep a GPU's
worth of weights between uses. When the device's true free memory drops below
``AIRLOCK_PRESSURE_FREE_MIB`` (default 0: off), idle workers' models are released at once,
through the same arbiter as admissions (single flight, least recently used first, stopping as
soon as the floor is back), without waiting for anyone to ask.

Both run on the bridge's heartbeat thread. They only send model commands on control lanes (which
never call back into the host) and change stand-ins' numbers; the ledger entries of released
models leave ``current_loaded_models`` at the next call boundary, on ComfyUI's execution
thread, as every other change of the list does.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from comfy_airlock.host.bridge import Bridge

log = logging.getLogger("comfy_airlock")

MIB = 1 << 20


def _seconds(name: str, default: float | None) -> float | None:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("off", "none", "never"):
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        log.error("comfy-airlock: %s=%r is not a number of seconds; using %s", name, raw, default)
        return default


def release_idle(bridge: Bridge, now: float | None = None) -> list[dict[str, Any]]:
    """One pass of both policies; returns what was released (for status and tests)."""
    now = time.monotonic() if now is None else now
    after = _seconds("AIRLOCK_IDLE_RELEASE_S", 600.0)
    floor = int((_seconds("AIRLOCK_PRESSURE_FREE_MIB", 0.0) or 0) * MIB)
    released: list[dict[str, Any]] = []
    held = [
        s
        for s in bridge.standins()
        if not s.gone
        and s.loaded_size() > 0
        and s.load_device.type != "cpu"
        and not s.pack.busy
        and not s.in_use
    ]
    if after is not None:
        for s in held:
            if now - s.pack.idle_since >= after:
                freed = s._command("unload", 0.0)
                released.append({"why": "idle", "model": repr(s.model), "freed": freed})
    if floor > 0:
        released += _relieve(bridge, floor)
    for r in released:
        log.info("[comfy-airlock] released %s (%s): %d bytes", r["model"], r["why"], r["freed"])
    return released


def _relieve(bridge: Bridge, floor: int) -> list[dict[str, Any]]:
    """Under pressure: idle workers' models go, by the arbiter's policy, until the floor is
    free again."""
    from comfy_airlock.host import admission

    try:
        card = admission.Card("cuda:0")
        if card.true_free() >= floor:
            return []
    except Exception as e:  # no device to read: nothing to relieve
        log.debug("no pressure reading: %s", e)
        return []
    cands = [
        c
        for c in admission._candidates(bridge, None, card, set())  # type: ignore[arg-type]
        if c["owner_idle"]
    ]
    if not cands:
        return []
    outcome = admission.arbiter().free_room(
        floor, cands, card.true_free, admission._evicter(bridge)
    )
    return [
        {"why": "pressure", "model": f"{s['owner']}#{s['model']}", "freed": s["freed"]}
        for s in outcome.get("steps", [])
        if not s.get("refused")
    ]

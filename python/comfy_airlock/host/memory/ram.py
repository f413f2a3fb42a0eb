"""One RAM budget for the host and its workers: the pin ceilings and the cache headroom.

Upstream sizes its pinned-memory ceiling at import from the whole machine
(``MAX_PINNED_MEMORY = 0.9 * RAM`` on Linux, 0.4 on Windows, RAM read by psutil, which does not
see a container's memory cgroup), and every worker runs its own copy of that code: each process
would believe it may page-lock 90 % of a RAM that they all share. Here the budget is upstream's
ratio applied once, to the cgroup-aware total (:func:`comfy_airlock.device.host_ram`), and split:

- the host's pins are upstream's (its ``TOTAL_PINNED_MEMORY``, read, never capped by us);
- each worker reports its own pinned bytes, and gets a ceiling: what it holds plus an equal
  share of the room left; when the host and workers already hold more than the budget, the
  workers' ceilings are cut, idle workers first, each group by water-filling (the largest
  holder is cut first, and nobody below the level is touched).

So the host's pinned bytes plus the workers' ceilings never exceed the budget whenever the
host's own pins fit in it, and the workers' sum is zero when they do not. Each worker's ceiling
becomes its own ``MAX_PINNED_MEMORY`` (worker/ram.py), sent on the control lane when it changes
(a lowered one at once, a raised one only past :data:`RAISE_STEP`, the safe direction). The
host's RAM cache headroom (set by its executor for each prompt) is mirrored to the workers as
theirs, so every process's ``ensure_pin_budget`` keeps the same RAM free. See
``docs/adr/0012-ram-budget.md``.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from comfy_airlock.device import host_ram
from comfy_airlock.host.memory.ledger import LEDGER, Ledger
from comfy_airlock.host.memory.shapes import WorkerHandle

log = logging.getLogger("comfy_airlock")

MIB = 1 << 20
#: A raised ceiling is only sent past this much (a lowered one always is).
RAISE_STEP = 64 * MIB


def budget(total: int, windows: bool = sys.platform == "win32") -> int:
    """Upstream's pin ratio (``MAX_PINNED_MEMORY``: 0.4 of RAM on Windows, 0.9 elsewhere)
    applied to ``total``."""
    return int(total * (0.4 if windows else 0.9))


@dataclass(frozen=True)
class Holder:
    """A worker as the split sees it: its pinned bytes, and whether it runs a call."""

    pinned: int
    idle: bool = True


def split(limit: int, host_pinned: int, workers: Mapping[str, Holder]) -> dict[str, int]:
    """The workers' pin ceilings: ``host_pinned + sum(ceilings) <= limit`` whenever
    ``host_pinned <= limit``, and every ceiling is zero when it is not.

    With room left (``limit - host_pinned - sum(pinned) >= 0``) each worker keeps what it holds
    plus an equal share of the room. Without, the workers' allowance (``limit - host_pinned``)
    is cut from idle workers first, then busy ones, each group by water-filling."""
    if not workers:
        return {}
    allowed = max(0, limit - max(0, host_pinned))
    held = {k: max(0, h.pinned) for k, h in workers.items()}
    room = allowed - sum(held.values())
    if room >= 0:
        share = room // len(held)
        return {k: p + share for k, p in held.items()}
    busy = {k: p for k, p in held.items() if not workers[k].idle}
    idle = {k: p for k, p in held.items() if workers[k].idle}
    out = _water_fill(busy, allowed)
    left = allowed - sum(busy.values())  # negative: the busy ones were cut, idle ones get 0
    out.update(_water_fill(idle, max(0, left)))
    return out


def _water_fill(held: dict[str, int], allowed: int) -> dict[str, int]:
    """``min(pinned, level)`` for the highest level whose sum fits ``allowed`` (integers)."""
    if sum(held.values()) <= allowed:
        return dict(held)
    out: dict[str, int] = {}
    left, rest = max(0, allowed), sorted(held.items(), key=lambda kv: kv[1])
    while rest:
        level = left // len(rest)
        k, p = rest[0]
        if p > level:  # everyone left is above the level: all get it
            return {**out, **{k: level for k, _ in rest}}
        out[k] = p
        left -= p
        rest.pop(0)
    return out


def _mm() -> Any:
    return sys.modules.get("comfy.model_management")


def host_pinned() -> int:
    """The host's page-locked bytes: upstream's running total (read)."""
    return max(0, int(getattr(_mm(), "TOTAL_PINNED_MEMORY", 0) or 0))


def host_headroom() -> int:
    """The host's RAM cache headroom, as its executor set it for the running prompt (read)."""
    mem = sys.modules.get("comfy.memory_management")
    return max(0, int(getattr(mem, "RAM_CACHE_HEADROOM", 0) or 0))


class RamBudget:
    """The split in force: recomputed whenever workers' reports arrive (the heartbeat and each
    call boundary), sent to the workers whose ceiling changed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.state: dict[str, Any] = {}
        self.ceilings: dict[str, int] = {}
        # What each worker (pack, generation) was last sent: {"pin_ceiling": n, ...}.
        self._sent: dict[tuple[str, int], dict[str, int]] = {}

    def update(self, ledger: Ledger = LEDGER) -> dict[str, int]:
        """Recomputes the split from the latest reports and sends what changed; returns the
        ceilings. Single flight: concurrent callers wait, so sends stay in order."""
        with self._lock:
            ram = host_ram()
            limit = budget(int(ram["total"]))
            packs = [p for p in ledger.handles() if p.generation() is not None]
            holders: dict[str, Holder] = {}
            for p in packs:
                report = ledger.last_report(p.name) or {}
                holders[p.name] = Holder(int(report.get("pinned") or 0), idle=not p.busy)
            hp = host_pinned()
            ceilings = split(limit, hp, holders)
            self.state = {
                "total": int(ram["total"]),
                "available": int(ram["available"]),
                "source": ram["source"],
                "budget": limit,
                "host_pinned": hp,
                "workers_pinned": sum(h.pinned for h in holders.values()),
                "headroom": host_headroom(),
            }
            in_force = {}
            for p in packs:
                self._send(p, "pin_ceiling", ceilings[p.name], ledger)
                self._send(p, "cache_headroom", self.state["headroom"], ledger)
                sent = self._sent.get((p.name, p.generation()), {}).get("pin_ceiling")
                # A raise below RAISE_STEP is not sent: the worker keeps its lower ceiling.
                in_force[p.name] = ceilings[p.name] if sent is None else min(sent, ceilings[p.name])
            self.ceilings = in_force
            self.state["ceilings"] = sum(in_force.values())
            live = {(p.name, p.generation()) for p in packs}
            for key in [k for k in self._sent if k not in live]:
                del self._sent[key]
            return dict(in_force)

    def push_headroom(self, pack: WorkerHandle) -> None:
        """Before a call (the execution thread): the host's headroom for the prompt that runs,
        if the worker was told another one (its first call: the next update tells it)."""
        value, generation = host_headroom(), pack.generation()
        sent = self._sent.get((pack.name, generation))
        if generation is None or sent is None or sent.get("cache_headroom") == value:
            return
        with self._lock:
            self._send(pack, "cache_headroom", value, LEDGER)

    def _send(self, pack: WorkerHandle, op: str, value: int, ledger: Ledger) -> None:
        generation = pack.generation()
        if generation is None:
            return
        key = (pack.name, generation)
        sent = self._sent.setdefault(key, {})
        last = sent.get(op)
        if last is not None and (
            value == last or (op == "pin_ceiling" and last < value < last + RAISE_STEP)
        ):
            return
        try:
            done, refusal, report = pack.model_command(key[1], 0, op, float(value), timeout=5.0)
        except Exception as e:  # a worker gone meanwhile: the next update sees it
            log.debug("[comfy-airlock] %s not sent to %s: %s", op, pack.name, e)
            return
        if refusal is None:
            sent[op] = value
            if done:
                log.info(
                    "[comfy-airlock] %s unpinned %d bytes (ceiling %d)", pack.name, done, value
                )
            if isinstance(report, dict):
                ledger.refresh(pack, key[1], report)  # type: ignore[arg-type]

    def ceiling(self, pack: str) -> int | None:
        """The ceiling last computed for ``pack``'s worker (None before the first split)."""
        return self.ceilings.get(pack)


RAM = RamBudget()

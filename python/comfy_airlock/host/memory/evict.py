"""Evicting worker models: the arbiter (``airlock-arbiter``, ADR 0010), the candidates it
decides over, and the eviction of one candidate.

Shared by admission (phase one of an ``admit?``/``oom?``) and the idle policy under pressure:
both decide with the same single-flight arbiter, over the same candidates, and evict the same
way (straight to the worker's control lane, which never calls back into the host).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from comfy_airlock.card import Card
from comfy_airlock.host.memory.ledger import Ledger
from comfy_airlock.host.memory.shapes import Candidate, WorkerHandle

_ARBITER: Any = None


def arbiter() -> Any:
    """The host's one arbiter (decisions are single flight across threads)."""
    global _ARBITER
    if _ARBITER is None:
        from comfy_airlock._native import Arbiter

        _ARBITER = Arbiter()
    return _ARBITER


class Refused(Exception):
    """A worker model phase one asked for was not evicted: the reason, for the decision's
    record (the arbiter skips it and goes on)."""


def candidates(
    ledger: Ledger, requester: WorkerHandle | None, card: Card, loading: set[int]
) -> list[Candidate]:
    """Worker models on the device, as the arbiter sees them. The requester's models named in
    its request are the ones its running node is loading: in use, whatever its last report
    said (the worker would refuse them)."""
    out: list[Candidate] = []
    for s in ledger.standins():
        if s.gone or s.loaded_size() <= 0 or s.load_device != card.device:
            continue
        mine = s.handle is requester
        out.append(
            {
                "owner": s.handle.name,
                "generation": s.generation,
                "model": s.model.model_id,
                "resident": s.loaded_size(),
                "in_use": s.in_use or (mine and s.model.model_id in loading),
                "last_used": s.last_used,
                "owner_idle": not s.handle.busy,
                "owner_is_requester": mine,
                "partial_ok": True,
            }
        )
    return out


def evicter(ledger: Ledger) -> Callable[[Candidate, int], int]:
    """The arbiter's ``evict(candidate, want)``: the bytes the worker freed, or
    :class:`Refused`."""

    def evict(candidate: Candidate, want: int) -> int:
        key = (candidate["owner"], candidate["generation"], candidate["model"])
        s = ledger.standin(key)
        if s is None or s.gone:
            raise Refused("its worker generation no longer holds it")
        # Straight to the worker: phase one's ``want`` is in true bytes already, so it must not
        # go through the stand-in's translation of upstream's blind requests.
        op, arg = ("unload", 0.0) if want >= s.loaded_size() else ("partially_unload", float(want))
        try:
            done, refusal, report = s.handle.model_command(s.generation, s.model.model_id, op, arg)
        except Exception as e:  # the worker died mid-command
            s.gone = True
            raise Refused(f"the command failed: {e}") from e
        if report:
            ledger.refresh(s.handle, s.generation, report)
        if refusal:
            raise Refused(str(refusal))
        return int(done)

    return evict

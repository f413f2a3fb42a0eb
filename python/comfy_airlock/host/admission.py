"""The host's answer to a worker that is about to load (``admit?``) or ran out of memory
(``oom?``): make room across every process on the card, then say how much there is.

Two phases, as docs/adr/0010-arbiter.md and the seed (Part 3) lay down:

1. **Worker models, by our policy** (:class:`comfy_airlock._native.Arbiter`): idle workers'
   models first, then least recently used, the requester's own last, never one a running node
   uses; true free memory re-read after every step, stopping at the minimum.
2. **The residual, by upstream**: ``free_memory(need + (blind - true), device,
   keep_loaded=<worker entries>)``, so every remaining victim is one of the host's own models and
   upstream's feedback loop sees its own progress. The term in brackets is the change of
   variables for a host whose free-memory reading is blind to other processes (WDDM): zero where
   the reading is device-wide.

It runs on the thread that waits for the worker's call (ComfyUI's execution thread), so
upstream's ledger is changed only there. Nothing here waits on a call lane: evictions go over
the other workers' control lanes, which never call back into the host.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from comfy_airlock.host.standin import StandIn

if TYPE_CHECKING:
    from comfy_airlock.host.bridge import Bridge
    from comfy_airlock.host.pack import IsolatedPack

log = logging.getLogger("comfy_airlock")

_ARBITER: Any = None


def arbiter() -> Any:
    global _ARBITER
    if _ARBITER is None:
        from comfy_airlock._native import Arbiter

        _ARBITER = Arbiter()
    return _ARBITER


class Card:
    """One device as the host reads it: the truth (NVML, or the simulated card) and the host's
    own view (what upstream's ``get_free_memory`` sees)."""

    def __init__(self, device: str) -> None:
        import torch

        self.device = torch.device(device)
        self._sim = _sim_card()

    def true_free(self) -> int:
        if self._sim is not None:
            return int(self._sim.free())
        truth = _nvml_free(self.device)
        if truth is not None:
            return truth
        return int(_mm().get_free_memory(self.device))

    def blind_term(self) -> int:
        """``blind_free - true_free`` for this process: never clamped; zero on a device-wide
        platform, where the host's reading already sees every process."""
        if self._sim is not None:
            return int(self._sim.free_seen_by(os.getpid())) - int(self._sim.free())
        truth = _nvml_free(self.device)
        if truth is None or not _blind_platform():
            return 0
        import torch

        free_cuda, _ = torch.cuda.mem_get_info(self.device)
        return int(free_cuda) - truth


def answer(bridge: Bridge, pack: IsolatedPack, topic: str, request: dict[str, Any]) -> dict:
    """Frees room for ``request`` (``device``, ``need``, ``minimum``, ``models``). A granted
    admission leaves a hold of ``need`` bytes that later decisions count as taken until the
    worker says its load is done (:func:`release`), or its call ends."""
    need = int(request["need"])
    card = Card(str(request["device"]))
    before = card.true_free()
    result: dict[str, Any] = {"topic": topic, "need": need, "free_before": before, "steps": []}
    # Room to spare, counting what earlier admissions hold: the decision evicts nothing and
    # only takes the hold, so the stand-ins are not read.
    short = before - int(arbiter().stats()["held_bytes"]) < need
    cands: list[dict] = []
    if short:
        bridge.sync()
        loading = {int(m) for m in request.get("models") or ()}
        cands = _candidates(bridge, pack, card, loading)
    outcome = arbiter().free_room(need, cands, card.true_free, _evicter(bridge), hold=True)
    if cands:
        result["candidates"] = cands  # the snapshot phase one decided on
    result["steps"] = outcome.get("steps", [])
    result["held"] = int(outcome["held"])
    hold = outcome["hold"]
    if hold is None:
        bridge.sync()
        # What earlier admissions hold is promised to their loads: upstream frees for it too.
        _upstream_residual(bridge, card, need + int(outcome["held"]))
        hold = arbiter().free_room(need, [], card.true_free, _evicter(bridge), hold=True)["hold"]
    result["free"] = card.true_free()
    result["granted"] = hold is not None
    result["hold"] = hold
    if hold is not None:
        pack.holds.append(hold)
    bridge.note_admission(pack.name, result)
    if not result["granted"]:
        log.info(
            "[comfy-airlock] %s for %r: %d bytes needed, %d free after freeing what could be",
            topic,
            pack.name,
            need,
            result["free"],
        )
    return result


def release(pack: IsolatedPack, holds: list[int] | None = None) -> None:
    """Gives back ``pack``'s admission holds: ``holds`` (the worker's load is done or failed),
    or all of them (its call ended, or its worker died)."""
    mine = pack.holds
    for h in list(mine if holds is None else holds):
        if h in mine:
            mine.remove(h)
            arbiter().release(int(h))


def _candidates(
    bridge: Bridge, requester: IsolatedPack, card: Card, loading: set[int]
) -> list[dict]:
    """Worker models on the device, as the arbiter sees them. The requester's models named in
    its request are the ones its running node is loading: in use, whatever its last report
    said (the worker would refuse them)."""
    out = []
    for s in bridge.standins():
        if s.gone or s.loaded_size() <= 0 or s.load_device != card.device:
            continue
        mine = s.pack is requester
        out.append(
            {
                "owner": s.pack.name,
                "generation": s.generation,
                "model": s.model.model_id,
                "resident": s.loaded_size(),
                "in_use": s.in_use or (mine and s.model.model_id in loading),
                "last_used": s.last_used,
                "owner_idle": not s.pack.busy,
                "owner_is_requester": mine,
                "partial_ok": True,
            }
        )
    return out


class Refused(Exception):
    """A worker model phase one asked for was not evicted: the reason, for the decision's
    record (the arbiter skips it and goes on)."""


def _evicter(bridge: Bridge) -> Any:
    def evict(candidate: dict, want: int) -> int:
        key = (candidate["owner"], candidate["generation"], candidate["model"])
        s = bridge.standin(key)
        if s is None or s.gone:
            raise Refused("its worker generation no longer holds it")
        # Straight to the worker: phase one's ``want`` is in true bytes already, so it must not
        # go through the stand-in's translation of upstream's blind requests.
        op, arg = ("unload", 0.0) if want >= s.loaded_size() else ("partially_unload", float(want))
        try:
            done, refusal, report = s.pack.model_command(s.generation, s.model.model_id, op, arg)
        except Exception as e:  # the worker died mid-command
            s.gone = True
            raise Refused(f"the command failed: {e}") from e
        if report:
            bridge.refresh(s.pack, s.generation, report)
        if refusal:
            raise Refused(str(refusal))
        return int(done)

    return evict


def _upstream_residual(bridge: Bridge, card: Card, need: int) -> None:
    mm = _mm()
    keep = [lm for lm in mm.current_loaded_models if isinstance(lm.model, StandIn)]
    mm.free_memory(need + card.blind_term(), card.device, keep_loaded=keep)


def _mm() -> Any:
    return sys.modules["comfy.model_management"]


def _sim_card() -> Any:
    path = os.environ.get("AIRLOCK_SIM_GPU")
    if not path:
        return None
    from comfy_airlock.device import SimGpu

    return SimGpu.open(path.split(os.pathsep)[0])


def _nvml_free(device: Any) -> int | None:
    if getattr(device, "type", None) != "cuda":
        return None
    try:
        from comfy_airlock import device as dev

        uuid = dev.cuda_uuid(device.index or 0)
        mem = dev.nvml_memory(uuid) if uuid else None
    except Exception:
        return None
    return int(mem["free"]) if mem else None


def _blind_platform() -> bool:
    """WDDM: Windows without TCC. Everything else reads device-wide."""
    return sys.platform == "win32"

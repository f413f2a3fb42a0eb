"""The ledger: worker models in the host's own ``current_loaded_models``, and the last report of
every worker.

Registration is reconciliation. Whenever a worker's report arrives (after every call, and on
the heartbeat for idle workers) the ledger creates missing stand-ins, refreshes residency by
sequence number, re-inserts a stand-in that upstream popped while the worker still holds its
model, and drops ours when the model is gone or its worker generation is.

Upstream walks ``current_loaded_models`` by index (``free_memory`` collects indices, then pops
them), so the list is changed only on the thread that runs ComfyUI's prompts, at call
boundaries (:meth:`Ledger.reconcile`, through ``heartbeat.sync``); the heartbeat thread changes
numbers (:meth:`Ledger.refresh`), marks dead workers' stand-ins as holding nothing, and queues
the rest: an insert that must wait is the worker's newest report, kept until a boundary
reconciles it (ADR 0030 says why none is lost). The only writes into the host's ComfyUI are
these entries.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

from comfy_airlock import card, device
from comfy_airlock.host.memory.reserve import RESERVE
from comfy_airlock.host.memory.shapes import WorkerHandle, WorkerReport
from comfy_airlock.host.memory.standin import StandIn

log = logging.getLogger("comfy_airlock")

Key = tuple[str, int, int]  # (pack, generation, model id)


def _mm() -> Any:
    return sys.modules.get("comfy.model_management")


class Ledger:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._standins: dict[Key, StandIn] = {}
        self._pending: dict[str, tuple[WorkerHandle, int, WorkerReport]] = {}
        self._handles: dict[str, WorkerHandle] = {}
        self._reports: dict[str, WorkerReport] = {}
        # Packs whose worker is on another card than the host (DeviceMismatch, by pack).
        self.mismatched: dict[str, Exception] = {}

    # --- reports ------------------------------------------------------------------------

    def refresh(self, handle: WorkerHandle, generation: int, report: WorkerReport) -> None:
        """Numbers only (any thread, also inside upstream's loop): residency of known models."""
        seq = int(report.get("seq") or 0)
        with self._lock:
            self._reports[handle.name] = report
            listed = set()
            for row in report.get("models") or ():
                listed.add(int(row["id"]))
                s = self._standins.get((handle.name, generation, int(row["id"])))
                if s is not None:
                    s.report_seq = max(s.report_seq, seq)
                    s.update(row)
            if seq:
                for (name, gen, model), s in self._standins.items():
                    if name == handle.name and gen == generation and model not in listed:
                        s.absent(seq)
            self._pending[handle.name] = (handle, generation, report)

    def reconcile(self, handle: WorkerHandle, generation: int, report: WorkerReport) -> bool:
        """Brings the ledger in line with one report. Call on ComfyUI's execution thread, never
        from inside upstream's loop. False: nothing was reconciled (no ComfyUI, or the worker
        is on another card)."""
        mm = _mm()
        if mm is None:
            return False
        name = handle.name
        mismatch = _device_mismatch(name, report)
        if mismatch is not None:
            if name not in self.mismatched:
                log.error("[comfy-airlock] pack %r: %s", name, mismatch)
            self.mismatched[name] = mismatch
            self.drop_pack(name)  # its models are on another card: not in this ledger
            return False
        self.mismatched.pop(name, None)
        with self._lock:
            self._handles[name] = handle
            self._reports[name] = report
            self._pending.pop(name, None)
            seen: set[Key] = set()
            for row in report.get("models") or ():
                key = (name, generation, int(row["id"]))
                s = self._standins.get(key)
                if s is None:
                    if int(row["resident"]) <= 0:
                        continue
                    s = StandIn(handle, generation, row, self.refresh)
                    self._standins[key] = s
                else:
                    s.update(row)
                s.report_seq = max(s.report_seq, int(report.get("seq") or 0))
                if s.resident <= 0:
                    continue
                seen.add(key)
                if not registered(mm, s):
                    insert(mm, s)
            for key in [k for k in self._standins if k[0] == name and k not in seen]:
                self._drop(mm, key)
        return True

    def queued(self) -> tuple[list[tuple[WorkerHandle, int, WorkerReport]], list[WorkerHandle]]:
        """What the heartbeat queued for :meth:`reconcile`, and the workers found dead."""
        with self._lock:
            pending = list(self._pending.values())
            dead = [h for h in self._handles.values() if not h.alive()]
        return pending, dead

    def drop_pack(self, name: str) -> None:
        mm = _mm()
        RESERVE.released()
        with self._lock:
            for key in [k for k in self._standins if k[0] == name]:
                self._drop(mm, key)
            self._pending.pop(name, None)

    def _drop(self, mm: Any, key: Key) -> None:
        s = self._standins.pop(key)
        if s.resident > 0:
            # A model the worker no longer holds (upstream's unload took it out of the
            # worker's ledger, or the pack let go of it): its bytes were released.
            RESERVE.released()
        s.gone = True
        if mm is None:
            return
        for i in range(len(mm.current_loaded_models) - 1, -1, -1):
            lm = mm.current_loaded_models[i]
            if lm.model is s:
                if lm.model_finalizer is not None:
                    lm.model_finalizer.detach()
                mm.current_loaded_models.pop(i)

    def mark_gone(self, handle: WorkerHandle) -> None:
        """``handle``'s worker gave no report: stand-ins of a generation that is no longer
        running hold nothing from now on (any thread; the list changes at the next sync)."""
        with self._lock:
            for key, s in self._standins.items():
                # ``s.handle is handle``: a pack loaded again under the same name has
                # stand-ins of its own, which this old one must not touch.
                if s.handle is handle and not handle.alive_generation(key[1]):
                    s.gone = True

    # --- readings -----------------------------------------------------------------------

    def handles(self) -> list[WorkerHandle]:
        with self._lock:
            return list(self._handles.values())

    def last_report(self, pack: str) -> WorkerReport | None:
        with self._lock:
            return self._reports.get(pack)

    def standin(self, key: Key) -> StandIn | None:
        with self._lock:
            return self._standins.get(key)

    def standins(self, pack: str | None = None) -> list[StandIn]:
        with self._lock:
            return [s for k, s in self._standins.items() if pack is None or k[0] == pack]

    def rows(self) -> list[dict[str, Any]]:
        mm = _mm()
        with self._lock:
            items = list(self._standins.items())
        return [
            {
                "pack": k[0],
                "generation": k[1],
                "model": k[2],
                "name": s.model.name,
                "device": str(s.load_device),
                "size": s.size,
                "resident": s.loaded_size(),
                "in_use": s.in_use,
                "last_used": s.last_used,
                "in_ledger": mm is not None and registered(mm, s),
            }
            for k, s in items
        ]


def ledger_rows() -> list[dict[str, Any]]:
    """ComfyUI's ``current_loaded_models`` as upstream orders it: its own models and ours."""
    mm = _mm()
    if mm is None:
        return []
    rows = []
    for i, lm in enumerate(list(mm.current_loaded_models)):
        p = lm.model
        if p is None:
            continue
        ours = isinstance(p, StandIn)
        rows.append(
            {
                "index": i,
                "kind": "worker" if ours else "host",
                "name": repr(p.model) if ours else type(getattr(p, "model", p)).__name__,
                "device": str(lm.device),
                "size": int(p.model_size()),
                "loaded": int(p.loaded_size()),
            }
        )
    return rows


_HOST_UUID: list[str | None] = []


def _device_mismatch(pack: str, report: WorkerReport) -> Exception | None:
    """A :class:`DeviceMismatch` when the worker's device (its report's UUID) is not the
    host's: its models would be booked against the wrong card. None when they match or either
    side has no device yet."""
    worker = report.get("device_uuid")
    if not worker:
        return None
    if not _HOST_UUID or _HOST_UUID[0] is None:
        try:
            _HOST_UUID[:] = [card.my_device_uuid()]
        except Exception:
            _HOST_UUID[:] = [None]
    host = _HOST_UUID[0]
    if host is None:
        return None
    try:
        device.resolve_device(host, {pack: str(worker)})
    except device.DeviceMismatch as e:
        return e
    return None


def registered(mm: Any, s: StandIn) -> bool:
    return any(lm.model is s for lm in mm.current_loaded_models)


def insert(mm: Any, s: StandIn) -> None:
    """As upstream registers a model: a LoadedModel that went through model_load, at the front
    (most recently used). The worker has loaded it already, so the load asked of the stand-in
    is skipped."""
    lm = mm.LoadedModel(s)
    s.registering = True
    try:
        lm.model_load()
    finally:
        s.registering = False
    # Not "in use this moment" for the host (seed row 38): upstream's controlnet and model-patch
    # code reloads what ``loaded_models(only_currently_used=True)`` returns, and a worker's model
    # is never one the host's running node uses. ``free_memory`` clears the flag on every
    # candidate anyway; only ``load_models_gpu`` of the stand-in itself sets it again.
    lm.currently_used = False
    mm.current_loaded_models.insert(0, lm)


LEDGER = Ledger()

"""The memory bridge: worker models in the host's own ledger (``current_loaded_models``).

Registration is reconciliation. Whenever a worker's report arrives (after every call, and on
the control-lane heartbeat for idle workers) the bridge creates missing stand-ins, refreshes
residency by sequence number, re-inserts a stand-in that upstream popped while the worker still
holds its model, and drops ours when the model is gone or its worker generation is.

Upstream walks ``current_loaded_models`` by index (``free_memory`` collects indices, then pops
them), so the list is changed only on the thread that runs ComfyUI's prompts, at call
boundaries (:meth:`Bridge.reconcile`, :meth:`Bridge.sync`); the heartbeat thread changes numbers
and marks dead workers' stand-ins as holding nothing, and queues the rest. The one exception is
an append, which moves no index: the heartbeat puts back a stand-in upstream dropped while its
worker kept the model (ADR 0013). The only writes into
the host's ComfyUI are these entries.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from comfy_airlock.host import idle, ram
from comfy_airlock.host.reserve import RESERVE, current_term
from comfy_airlock.host.standin import StandIn

if TYPE_CHECKING:
    from comfy_airlock.host.pack import IsolatedPack

log = logging.getLogger("comfy_airlock")

Key = tuple[str, int, int]  # (pack, generation, model id)


def _mm() -> Any:
    return sys.modules.get("comfy.model_management")


class Bridge:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._standins: dict[Key, StandIn] = {}
        self._pending: dict[str, tuple[IsolatedPack, int, dict[str, Any]]] = {}
        self._heartbeat: threading.Thread | None = None
        self._packs: dict[str, IsolatedPack] = {}
        self._reports: dict[str, dict[str, Any]] = {}
        # The last admissions answered (newest last), for status and tests.
        self.admissions: list[dict[str, Any]] = []
        # What idle workers released (host/idle.py), newest last.
        self.released: list[dict[str, Any]] = []
        # Packs whose worker is on another card than the host (DeviceMismatch, by pack).
        self.mismatched: dict[str, Exception] = {}

    # --- reports ------------------------------------------------------------------------

    def refresh(self, pack: IsolatedPack, generation: int, report: dict[str, Any]) -> None:
        """Numbers only (any thread, also inside upstream's loop): residency of known models."""
        seq = int(report.get("seq") or 0)
        with self._lock:
            self._reports[pack.name] = report
            listed = set()
            for row in report.get("models") or ():
                listed.add(int(row["id"]))
                s = self._standins.get((pack.name, generation, int(row["id"])))
                if s is not None:
                    s.report_seq = max(s.report_seq, seq)
                    s.update(row)
            if seq:
                for (name, gen, model), s in self._standins.items():
                    if name == pack.name and gen == generation and model not in listed:
                        s.absent(seq)
            self._pending[pack.name] = (pack, generation, report)

    def reconcile(self, pack: IsolatedPack, generation: int, report: dict[str, Any]) -> None:
        """Brings the ledger in line with one report. Call on ComfyUI's execution thread, never
        from inside upstream's loop."""
        mm = _mm()
        if mm is None:
            return
        mismatch = _device_mismatch(pack.name, report)
        if mismatch is not None:
            if pack.name not in self.mismatched:
                log.error("[comfy-airlock] pack %r: %s", pack.name, mismatch)
            self.mismatched[pack.name] = mismatch
            self.drop_pack(pack.name)  # its models are on another card: not in this ledger
            return
        self.mismatched.pop(pack.name, None)
        with self._lock:
            self._packs[pack.name] = pack
            self._reports[pack.name] = report
            self._pending.pop(pack.name, None)
            seen: set[Key] = set()
            for row in report.get("models") or ():
                key = (pack.name, generation, int(row["id"]))
                s = self._standins.get(key)
                if s is None:
                    if int(row["resident"]) <= 0:
                        continue
                    s = StandIn(pack, generation, row)
                    self._standins[key] = s
                else:
                    s.update(row)
                s.report_seq = max(s.report_seq, int(report.get("seq") or 0))
                if s.resident <= 0:
                    continue
                seen.add(key)
                s.kept = False
                if not _registered(mm, s):
                    _insert(mm, s)
            for key in [k for k in self._standins if k[0] == pack.name and k not in seen]:
                self._drop(mm, key)
        self.update_reserve(shrink=True)
        self.update_ram()
        self._ensure_heartbeat()

    def sync(self) -> None:
        """Applies what the heartbeat queued (ComfyUI's execution thread only)."""
        with self._lock:
            pending = list(self._pending.values())
            dead = [p for p in self._packs.values() if not p.alive()]
        for pack, generation, report in pending:
            self.reconcile(pack, generation, report)
        for pack in dead:
            self.drop_pack(pack.name)

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

    # --- idle workers -------------------------------------------------------------------

    def _ensure_heartbeat(self) -> None:
        if self._heartbeat is not None:
            return
        interval = float(os.environ.get("AIRLOCK_HEARTBEAT_S", "2.0"))
        t = threading.Thread(
            target=self._beat, args=(interval,), name="airlock-heartbeat", daemon=True
        )
        self._heartbeat = t
        t.start()

    def _beat(self, interval: float) -> None:
        while True:
            time.sleep(interval)
            with self._lock:
                packs = list(self._packs.values())
            for pack in packs:
                try:
                    generation, report = pack.heartbeat()
                except Exception:
                    generation, report = None, None
                if report is None:
                    with self._lock:
                        for key, s in self._standins.items():
                            # ``s.pack is pack``: a pack loaded again under the same name has
                            # stand-ins of its own, which this old one must not touch.
                            if s.pack is pack and not pack.alive_generation(key[1]):
                                s.gone = True
                    continue
                self.refresh(pack, generation, report)
            self._restore_kept()
            try:
                self.released += idle.release_idle(self)
                del self.released[:-64]
            except Exception as e:  # never let the policy stop the heartbeat
                log.warning("[comfy-airlock] idle release failed: %s", e)
            self.update_reserve(shrink=RESERVE.quiet(2 * interval))
            self.update_ram()

    def _restore_kept(self) -> None:
        """Puts back the stand-ins upstream dropped while their worker kept the model (a
        ``detach`` translated on a blind platform, standin.py), so that upstream can evict them
        again before the next call boundary. Off ComfyUI's thread, so by appending: the one
        change to the list that moves no index upstream may be holding (docs/adr/0013)."""
        mm = _mm()
        if mm is None:
            return
        with self._lock:
            for s in self._standins.values():
                if not s.kept or _registered(mm, s):
                    continue  # still listed: upstream's loop has not popped it yet
                s.kept = False
                if not s.gone and s.resident > 0:
                    _insert(mm, s, at_end=True)

    def update_ram(self) -> None:
        """Splits the pin budget again from the latest reports (host/ram.py)."""
        try:
            ram.RAM.update(self)
        except Exception as e:  # never let the RAM split break a call or the heartbeat
            log.warning("[comfy-airlock] RAM budget not updated: %s", e)

    def packs(self) -> list[IsolatedPack]:
        with self._lock:
            return list(self._packs.values())

    def update_reserve(self, shrink: bool = False) -> None:
        """Publishes the reserve for the host's blind view (a no-op where it is not blind).
        ``shrink`` only where no upstream loop is running (see reserve.py)."""
        try:
            RESERVE.update(current_term(), shrink=shrink)
        except Exception as e:  # never let the reserve break a call or the heartbeat
            log.debug("reserve not updated: %s", e)

    # --- status -------------------------------------------------------------------------

    def last_report(self, pack: str) -> dict[str, Any] | None:
        with self._lock:
            return self._reports.get(pack)

    def standin(self, key: Key) -> StandIn | None:
        with self._lock:
            return self._standins.get(key)

    def note_admission(self, pack: str, result: dict[str, Any]) -> None:
        with self._lock:
            self.admissions.append({"pack": pack, **result})
            del self.admissions[:-64]

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
                "in_ledger": mm is not None and _registered(mm, s),
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


def _device_mismatch(pack: str, report: dict[str, Any]) -> Exception | None:
    """A :class:`DeviceMismatch` when the worker's device (its report's UUID) is not the
    host's: its models would be booked against the wrong card. None when they match or either
    side has no device yet."""
    worker = report.get("device_uuid")
    if not worker:
        return None
    from comfy_airlock import device

    if not _HOST_UUID or _HOST_UUID[0] is None:
        try:
            _HOST_UUID[:] = [device.my_device_uuid()]
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


def _registered(mm: Any, s: StandIn) -> bool:
    return any(lm.model is s for lm in mm.current_loaded_models)


def _insert(mm: Any, s: StandIn, at_end: bool = False) -> None:
    """As upstream registers a model: a LoadedModel that went through model_load, at the front
    (most recently used), or ``at_end`` where the list may be walked by index on another thread.
    The worker has loaded it already, so the load asked of the stand-in is skipped."""
    lm = mm.LoadedModel(s)
    s.registering = True
    try:
        lm.model_load()
    finally:
        s.registering = False
    if at_end:
        mm.current_loaded_models.append(lm)
    else:
        mm.current_loaded_models.insert(0, lm)


BRIDGE = Bridge()

"""The two moments the ledger catches up with the workers, and what follows each.

- **A call boundary** (:func:`sync`, :func:`reconciled`: ComfyUI's execution thread, before a
  call and when a worker's report arrives with its reply): the queued reports are reconciled
  into ``current_loaded_models``, the reserve may shrink, the RAM split is sent.
- **The timer** (:class:`Heartbeat`, one thread, every ``heartbeat_s``): the workers' latest
  reports are taken from their liveness timers (the core's, which asks each worker's control
  thread for its report at every ping: no Python runs in the worker, and this thread sends
  nothing), stand-ins' numbers refreshed, the idle policies run
  (``idle.py``), the reserve grows (and shrinks once no stand-in has been asked for two
  intervals), the RAM split is sent. One message timer, then: the liveness ping; this one
  paces the host-wide policies over what it brought (ADR 0020, "One heartbeat").

The timer never changes upstream's list (ledger.py says why, ADR 0030); the boundary does.
"""

from __future__ import annotations

import logging
import threading
import time

from comfy_airlock import settings
from comfy_airlock.host.memory import idle
from comfy_airlock.host.memory.ledger import LEDGER, Ledger
from comfy_airlock.host.memory.ram import RAM
from comfy_airlock.host.memory.reserve import RESERVE, host_blind_term
from comfy_airlock.host.memory.shapes import WorkerHandle, WorkerReport

log = logging.getLogger("comfy_airlock")


def update_reserve(shrink: bool = False) -> None:
    """Publishes the reserve for the host's blind view (a no-op where it is not blind).
    ``shrink`` only where no upstream loop is running (see reserve.py)."""
    try:
        RESERVE.update(host_blind_term(), shrink=shrink)
    except Exception as e:  # never let the reserve break a call or the heartbeat
        log.debug("reserve not updated: %s", e)


def update_ram(ledger: Ledger = LEDGER) -> None:
    """Splits the pin budget again from the latest reports (ram.py)."""
    try:
        RAM.update(ledger)
    except Exception as e:  # never let the RAM split break a call or the heartbeat
        log.warning("[comfy-airlock] RAM budget not updated: %s", e)


def reconciled(handle: WorkerHandle, generation: int, report: WorkerReport) -> None:
    """A worker's report at a call boundary: the ledger reconciled, then the reserve and the
    RAM split follow it, and the timer runs from the first report on."""
    if not LEDGER.reconcile(handle, generation, report):
        return
    update_reserve(shrink=True)
    update_ram()
    HEARTBEAT.ensure()


def sync() -> None:
    """Applies what the heartbeat queued (ComfyUI's execution thread only)."""
    pending, dead = LEDGER.queued()
    for handle, generation, report in pending:
        reconciled(handle, generation, report)
    for handle in dead:
        LEDGER.drop_pack(handle.name)


class Heartbeat:
    """The timer thread, started by the first reconciled report."""

    def __init__(self, ledger: Ledger = LEDGER) -> None:
        self._ledger = ledger
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def ensure(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            interval = settings.get().heartbeat_s
            self._thread = threading.Thread(
                target=self._run, args=(interval,), name="airlock-heartbeat", daemon=True
            )
            self._thread.start()

    def _run(self, interval: float) -> None:
        while True:
            time.sleep(interval)
            self.beat(interval)

    def beat(self, interval: float) -> None:
        """One pass (the timer's thread)."""
        ledger = self._ledger
        for handle in ledger.handles():
            try:
                generation, report = handle.last_report()
            except Exception:
                generation, report = None, None
            if report is None or generation is None:
                ledger.mark_gone(handle)
                continue
            if _older(report, ledger.last_report(handle.name)):
                continue
            ledger.refresh(handle, generation, report)
        try:
            idle.release_idle(ledger)
        except Exception as e:  # never let the policy stop the heartbeat
            log.warning("[comfy-airlock] idle release failed: %s", e)
        update_reserve(shrink=RESERVE.quiet(2 * interval))
        update_ram(ledger)


def _older(report: WorkerReport, known: WorkerReport | None) -> bool:
    """Whether ``report`` is older than what the ledger has of the same process: a command's
    answer (which a caller hands on at once) may be newer than what the liveness timer read
    before it."""
    if known is None or known.get("pid") != report.get("pid"):
        return False
    return int(report.get("seq") or 0) < int(known.get("seq") or 0)


HEARTBEAT = Heartbeat()

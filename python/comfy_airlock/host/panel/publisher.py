"""What the panel hears over ComfyUI's websocket, and when (docs/adr/0026).

Two daemon threads, off every call's path:

- ``airlock-panel-memory`` takes a memory sample into the history (history.py) every
  ``SAMPLE_S``, whether or not a browser is connected, and sends it as ``comfy-airlock.memory``
  when one is. It reads no worker state (only the pids last seen), so it keeps its pace while a
  worker is being started, when the status waits;
- ``airlock-panel`` reads the status (the packs' rows, ComfyUI's ledger) every ``TICK_S`` while
  a browser is connected (every ``SAMPLE_S`` otherwise, for the pids) and sends it as
  ``comfy-airlock.status`` only when it changed, at most once per ``MIN_GAP_S``: a run of
  changes is coalesced into the latest. An action (actions.py) nudges it, so its effect shows
  at once, within the same limit.

So a browser gets at most 1/MIN_GAP_S + 1/SAMPLE_S events a second, and nothing while nothing
changes but the memory sample. Events go through upstream's ``send_sync`` to every client
(``sid`` None), as ComfyUI's own ``status`` does. Each status carries ``seq``, bumped per
change: the browser keeps the newest of the events and its one initial ``GET /airlock/panel``.
Resident sizes change all the time, so they travel in the memory samples, not in the status.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from comfy_airlock.host.panel.history import SAMPLE_S, DeviceReader, History, sample

log = logging.getLogger("comfy_airlock")

STATUS_EVENT = "comfy-airlock.status"
MEMORY_EVENT = "comfy-airlock.memory"
TICK_S = 0.5
MIN_GAP_S = 0.5

# Row fields that move on every read: they reach the browser in the memory samples.
_VOLATILE = ("rss_mib",)

Rows = list[dict[str, Any]]


class Pacer:
    """At most one send per ``gap`` seconds (a pure rule over the caller's clock)."""

    def __init__(self, gap: float) -> None:
        self.gap = gap
        self._last = -math.inf

    def wait(self, now: float) -> float:
        """Seconds until the next send is allowed (0: now)."""
        return max(0.0, self._last + self.gap - now)

    def sent(self, now: float) -> None:
        self._last = now


class Publisher:
    """``read_packs()`` gives the packs' status rows, ``read_ledger()`` ComfyUI's loaded models;
    ``send(event, data)`` reaches every browser; ``clients()`` counts the connected ones."""

    def __init__(
        self,
        read_packs: Callable[[], Rows],
        read_ledger: Callable[[], Rows],
        send: Callable[[str, Any], None],
        clients: Callable[[], int],
        history: History | None = None,
        card: DeviceReader | None = None,
    ) -> None:
        self._read_packs = read_packs
        self._read_ledger = read_ledger
        self._send = send
        self._clients = clients
        self.history = history or History()
        self._card = card or DeviceReader()
        self._pacer = Pacer(MIN_GAP_S)
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._published: str | None = None
        self._pids: dict[str, int] = {}
        self.seq = 0
        self._started = False
        self._stopped = threading.Event()

    # --- what the routes ask --------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The status now, with the seq of the last one sent (an event that carries the same
        or newer is never older than this), and the history."""
        packs, ledger = self._status_body()
        with self._lock:
            seq = self.seq
        return {
            "seq": seq,
            "packs": packs,
            "ledger": ledger,
            "history": self.history.samples(),
            "sample_s": self.history.every_s,
            "window_s": self.history.window_s,
            "events": {"status": STATUS_EVENT, "memory": MEMORY_EVENT},
            "limits": {"status_min_gap_s": MIN_GAP_S, "sample_s": SAMPLE_S},
        }

    def nudge(self) -> None:
        """Something changed (an action ran): look now, not at the next tick."""
        self._wake.set()

    # --- the threads ----------------------------------------------------------------------

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        for target, name in (
            (self._run_status, "airlock-panel"),
            (self._run_memory, "airlock-panel-memory"),
        ):
            threading.Thread(target=target, name=name, daemon=True).start()

    def stop(self) -> None:
        """Ends both threads (ComfyUI never needs to: they are daemons)."""
        self._stopped.set()
        self._wake.set()

    def _run_status(self) -> None:
        while not self._stopped.is_set():
            wait = self.history.every_s
            try:
                if self._clients() > 0:
                    wait = self.publish_status(time.monotonic()) or TICK_S
                else:
                    self._status_body()  # the pids, for the memory samples
            except Exception as e:  # the panel must never stop over one bad read
                log.warning("[comfy-airlock] panel status failed: %s", e)
            self._wake.wait(wait)
            self._wake.clear()

    def _run_memory(self) -> None:
        while not self._stopped.is_set():
            t0 = time.monotonic()
            try:
                self.take_sample()
            except Exception as e:
                log.warning("[comfy-airlock] panel memory sample failed: %s", e)
            self._stopped.wait(max(0.0, self.history.every_s - (time.monotonic() - t0)))

    def take_sample(self) -> None:
        with self._lock:
            pids = dict(self._pids)
        point = sample(pids, self._read_ledger, self._card)
        self.history.add(point)
        if self._clients() > 0:
            self._send(MEMORY_EVENT, point)

    def publish_status(self, now: float) -> float:
        """Sends the status if it changed and the pacer allows; returns how long a change
        still waits for the pacer (0: nothing waits)."""
        packs, ledger = self._status_body()
        body = json.dumps([packs, ledger], sort_keys=True, default=str)
        with self._lock:
            if body == self._published:
                return 0.0
            wait = self._pacer.wait(now)
            if wait > 0:
                return wait
            self._pacer.sent(now)
            self._published = body
            self.seq += 1
            seq = self.seq
        # What went through json.dumps: upstream's publish loop ends on data it cannot encode.
        packs, ledger = json.loads(body)
        self._send(STATUS_EVENT, {"seq": seq, "packs": packs, "ledger": ledger})
        return 0.0

    def _status_body(self) -> tuple[Rows, Rows]:
        """The rows (which wait while a worker of theirs is being started) and the ledger."""
        packs = self._read_packs()
        pids = {r["pack"]: r["pid"] for r in packs if r.get("state") == "running" and r.get("pid")}
        with self._lock:
            self._pids = pids
        packs = [{k: v for k, v in row.items() if k not in _VOLATILE} for row in packs]
        return packs, self._read_ledger()

"""Idle shared memory goes back: after a quiet spell, and at once under RAM pressure (ADR 0028).

A warm side keeps the segments of its pool for reuse (up to 2 GiB idle, so back-to-back calls
never create one again), and its mappings of its peer's segments populated (so a view never
faults). Between prompts that is memory nobody uses: a warm worker held 1.9 GiB resident after
the tensor rows of the benchmark. So one daemon thread per process looks, every second, at the
lanes registered with it (the worker's own lane in a worker, every :class:`Worker`'s in the
host; a worker also refreshes the memory report its heartbeat answers with, which calls no
longer remake when nothing changed). A lane whose side has made no call for ``settings.idle_trim_s`` seconds (default 5;
``off`` turns it off) is trimmed, once per quiet spell:

- its pool's idle segments are retired and their memory freed at once (``Lane.trim``; the peer
  hears of the retirement with the next frame);
- our mappings of segments are dropped (a live view keeps its own): the peer's pages leave our
  page tables and our resident set, and come back, populated again, on the next use;
- in a worker, glibc's free heap is returned to the system (``malloc_trim``).

Under RAM pressure (the memory available to this process's cgroup, or the machine, below
:data:`PRESSURE_SHARE` of the total: the share ADR 0012's budget leaves outside pinned memory)
every idle lane is trimmed at once, and the host also drops its kept copies (ADR 0027).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from comfy_airlock import kept, mappings, settings

log = logging.getLogger("comfy_airlock")

#: RAM available below this share of the total is pressure (1 - ADR 0012's pin ratio).
PRESSURE_SHARE = 0.10
_PERIOD_S = 1.0


class Subject(Protocol):
    """What the trimmer needs of a side: its lane, and how long it has been idle."""

    @property
    def lane(self) -> Any: ...

    def idle_seconds(self) -> float | None: ...


def idle_after() -> float | None:
    """Seconds without a call before a side is trimmed (``settings.idle_trim_s``); None: never."""
    return settings.get().idle_trim_s


def _malloc_trim() -> None:
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: not glibc
        ctypes.CDLL(None).malloc_trim(0)


def trim(lane, *, worker: bool, drop_kept: bool = False) -> int:
    """Trims one lane now (see the module): returns the bytes of our segments given back."""
    freed = lane.trim()
    mappings.drop_all(lane)
    if drop_kept:
        freed += kept.drop_all(lane)
        freed += lane.trim()
    if worker:
        _malloc_trim()
    return freed


def under_pressure() -> bool:
    from comfy_airlock.device import host_ram

    try:
        ram = host_ram()
    except Exception:  # nothing to read: no pressure we can see
        return False
    return int(ram["available"]) < PRESSURE_SHARE * int(ram["total"])


class _Trimmer:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # id -> (weak subject, worker?, monotonic time of its last trim)
        self._subjects: dict[int, tuple[weakref.ref | Any, bool, float]] = {}
        self._ticks: dict[int, Callable[[], None]] = {}
        self._thread: threading.Thread | None = None

    def register(
        self, subject: Subject, *, worker: bool, tick: Callable[[], None] | None = None
    ) -> None:
        after = idle_after()
        if after is None and tick is None:
            return
        try:
            ref: Any = weakref.ref(subject)
        except TypeError:  # a native object without weak references lives for the process
            ref = lambda s=subject: s  # noqa: E731
        with self._lock:
            self._subjects[id(subject)] = (ref, worker, 0.0)
            if tick is not None:
                self._ticks[id(subject)] = tick
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="airlock-idle-trim", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            after = idle_after()  # read at each look: a setting changed while running applies
            time.sleep(_PERIOD_S if after is None else min(_PERIOD_S, max(after, 0.05)))
            try:
                self.pass_once(after)
            except Exception as e:  # never let the thread die over one lane
                log.debug("idle trim: %s", e)

    def pass_once(self, after: float | None, now: float | None = None) -> list[int]:
        """One look at every lane; returns the bytes each trimmed lane gave back."""
        now = time.monotonic() if now is None else now
        pressure = None
        out = []
        with self._lock:
            items = list(self._subjects.items())
        for key, (ref, worker, last_trim) in items:
            subject = ref()
            if subject is None:
                with self._lock:
                    self._subjects.pop(key, None)
                    self._ticks.pop(key, None)
                continue
            idle = subject.idle_seconds()
            lane = subject.lane
            if idle is None or lane is None:
                continue
            tick = self._ticks.get(key)
            if tick is not None:
                tick()
            if after is None:
                continue
            quiet = idle >= after and now - idle > last_trim  # a call since the last trim
            if not quiet:
                if pressure is None:
                    pressure = under_pressure()
                if not pressure:
                    continue
            out.append(trim(lane, worker=worker, drop_kept=bool(pressure) and not worker))
            with self._lock:
                if key in self._subjects:
                    self._subjects[key] = (ref, worker, now)
        return out


TRIMMER = _Trimmer()


def register(subject: Subject, *, worker: bool, tick: Callable[[], None] | None = None) -> None:
    """Trims ``subject``'s lane when it has been idle (see the module); ``tick()`` runs at each
    look while the subject is idle (a worker refreshes its memory report with it)."""
    TRIMMER.register(subject, worker=worker, tick=tick)

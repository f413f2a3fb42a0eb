"""How long a worker may stay silent, and how an interrupted node is made to stop.

Read from the settings (``comfy_airlock.settings``) when a pack's worker starts, so a user can
change them without touching any pack (documented in ``docs/reliability.md`` and the user
guide's table): the hung grace (default 30 s; ``off`` disables the watch: a worker whose control
lane stays silent this long is declared hung and replaced; its control thread answers without
the GIL, so a node that runs for hours is never hung, a frozen or stopped process is), the
liveness interval (default 1 s), and after a cancel the delays before SIGINT (default 5 s) and
before SIGKILL and a new worker (default 10 s; ``off`` leaves either step out).

The liveness timer is also the one that reads workers' memory reports (each ping asks for the
latest, ADR 0020's "One heartbeat"), so it runs even with the hung watch off, and never less
often than the memory heartbeat reads them (its ``heartbeat_s``): a report is never older
than one of its passes.
"""

from __future__ import annotations

from dataclasses import dataclass

from comfy_airlock import settings


@dataclass(frozen=True)
class Timing:
    liveness: tuple[float, float | None]
    signal_after: float | None
    kill_after: float | None

    @classmethod
    def from_env(cls) -> Timing:
        knobs = settings.get()
        grace = knobs.hung_grace_s
        interval = min(knobs.liveness_interval_s or 1.0, knobs.heartbeat_s)
        return cls(
            liveness=(interval if grace is None else min(interval, grace), grace),
            signal_after=knobs.interrupt_signal_s,
            kill_after=knobs.interrupt_kill_s,
        )

"""How long a worker may stay silent, and how an interrupted node is made to stop.

Read from the host's environment when a pack's worker starts, so a user can change them
without touching any pack (documented in ``docs/reliability.md``):

- ``AIRLOCK_HUNG_GRACE_S`` (default 30): a worker whose control lane stays silent this long is
  declared hung and replaced. Its control thread answers without the GIL, so a node that runs
  for hours is never hung; a frozen or stopped process is. ``off`` disables the watch.
- ``AIRLOCK_LIVENESS_INTERVAL_S`` (default 1): how often the control lane is pinged.
- ``AIRLOCK_INTERRUPT_SIGNAL_S`` (default 5): after a cancel, how long a node may go on
  without checking the flag before the worker gets SIGINT. ``off`` leaves the step out.
- ``AIRLOCK_INTERRUPT_KILL_S`` (default 10): how long after that before SIGKILL, and a new
  worker for the next call. ``off`` leaves the step out.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

log = logging.getLogger("comfy_airlock")


@dataclass(frozen=True)
class Timing:
    liveness: tuple[float, float] | None
    signal_after: float | None
    kill_after: float | None

    @classmethod
    def from_env(cls) -> Timing:
        grace = _seconds("AIRLOCK_HUNG_GRACE_S", 30.0)
        interval = _seconds("AIRLOCK_LIVENESS_INTERVAL_S", 1.0) or 1.0
        return cls(
            liveness=None if grace is None else (min(interval, grace), grace),
            signal_after=_seconds("AIRLOCK_INTERRUPT_SIGNAL_S", 5.0),
            kill_after=_seconds("AIRLOCK_INTERRUPT_KILL_S", 10.0),
        )


def _seconds(name: str, default: float) -> float | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    if raw.strip().lower() in ("off", "none", "never"):
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value < 0:
        log.error("comfy-airlock: %s=%r is not a number of seconds; using %s", name, raw, default)
        return default
    return value

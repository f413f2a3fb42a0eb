"""The panel's memory history: RAM and device memory sampled every ``SAMPLE_S`` seconds into a
ring buffer of the last ``WINDOW_S``, host-side, so a tab opened late draws the last minutes.

A sample reads only what is cheap and never waits on a worker: ``/proc`` for resident sizes,
the host's RAM as its cgroup bounds it (:func:`comfy_airlock.device.host_ram`), the device
through the process's one device truth (``comfy_airlock.card``: NVML held open, device-wide, so
workers' memory counts; or the simulated card), and, where there is a device, what ComfyUI's
ledger holds on it.
It runs on a thread of the panel's own (publisher.py), never on a call's path.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from comfy_airlock import card, device

log = logging.getLogger("comfy_airlock")

SAMPLE_S = 2.0
WINDOW_S = 600.0

_PAGE = os.sysconf("SC_PAGE_SIZE")


class History:
    """The last ``window_s`` seconds of samples, oldest first (thread-safe)."""

    def __init__(self, window_s: float = WINDOW_S, every_s: float = SAMPLE_S) -> None:
        self.window_s = window_s
        self.every_s = every_s
        self._samples: deque[dict[str, Any]] = deque(maxlen=int(window_s / every_s) + 1)
        self._lock = threading.Lock()

    def add(self, sample: dict[str, Any]) -> None:
        with self._lock:
            self._samples.append(sample)

    def samples(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._samples)


def rss(pid: int | None) -> int | None:
    """Resident bytes of ``pid`` (``/proc/<pid>/statm``); None when it is gone."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


class DeviceReader:
    """The card ComfyUI computes on, read device-wide. Which card is known once torch has
    initialised CUDA in ComfyUI (or a simulated card stands for it): until then, and without
    NVML, there is no device to read and samples carry ``None``."""

    def __init__(self, truth: card.Truth | None = None) -> None:
        self._truth = truth  # None: the process's own (card.truth()), at the first read
        self._uuid: str | None = None
        self._failed = False

    def read(self) -> dict[str, Any] | None:
        if self._failed:
            return None
        try:
            truth = self._truth or card.truth()
            if self._uuid is None:
                # Never creates a CUDA context: the card is known once ComfyUI made one.
                self._uuid = card.my_device_uuid() if self._truth is None else truth.uuid(0)
                if self._uuid is None:
                    return None
            memory = truth.memory(self._uuid)
        except Exception as e:  # a driver that fails once is not asked every 2 s
            log.warning("[comfy-airlock] panel: the device cannot be read: %s", e)
            self._failed = True
            return None
        if memory is None:
            return None
        return {"uuid": memory["uuid"], "total": memory["total"], "used": memory["used"]}


def sample(
    pids: dict[str, int], read_ledger: Callable[[], list[dict[str, Any]]], card: DeviceReader
) -> dict[str, Any]:
    """One point of the chart. ``pids``: each running worker's, by pack; ``read_ledger()``:
    ComfyUI's loaded models, read only where there is a device (what its own and the workers'
    models hold on it)."""
    try:
        ram = device.host_ram()
        total, used = int(ram["total"]), int(ram["used"])
    except Exception:  # no /proc/meminfo: the RAM lines are left out, the rest is drawn
        total, used = None, None
    gpu = card.read()
    models = None
    if gpu is not None:
        on_device = [e for e in read_ledger() if not str(e.get("device", "cpu")).startswith("cpu")]
        models = {
            "host": sum(int(e["loaded"]) for e in on_device if e.get("kind") == "host"),
            "workers": sum(int(e["loaded"]) for e in on_device if e.get("kind") == "worker"),
        }
    return {
        "t": round(time.time(), 3),
        "ram": {
            "total": total,
            "used": used,
            "comfyui": rss(os.getpid()),
            "workers": {pack: rss(pid) for pack, pid in pids.items()},
        },
        "device": gpu,
        "models": models,
    }

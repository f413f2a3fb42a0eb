"""One device truth per process, chosen once, and a device as this process reads it.

The truth is what a card really has free, every process's allocations counted. It is chosen at
first use and kept (:func:`truth`): the simulated card(s) the settings name (tests and
benchmarks, ``docs/adr/0006-simulated-gpu.md``), else NVML (a
:class:`~comfy_airlock.device.DeviceTruth` kept open per device UUID, not re-opened at every
reading), else none (no NVIDIA driver: readers say ``None`` and callers keep upstream's own
semantics).

A :class:`Card` is one device for this process (:func:`card`, one per device, cached): its
true free memory, the free memory this process *sees* (what upstream's ``get_free_memory``
reads through CUDA), and the **blind term**, ``seen_free - true_free``. The term is zero where
the reading is device-wide (Linux); on a platform whose reading is a per-process budget (WDDM)
it is the change of variables both sides need: the host publishes it as its reserve
(``host/memory/reserve.py``), a worker raises its own reserve by it for a load
(``worker/admission.py``). It is never clamped: just after a re-partition the blind view reads
*above* the truth.

Both the host and its workers import this module (it is below both; neither imports the other).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from comfy_airlock import device, settings


def _blind_platform() -> bool:
    """WDDM: Windows without TCC. Everything else reads device-wide."""
    return sys.platform == "win32"


class Truth:
    """The device truth of this process: ``kind`` is ``"sim"``, ``"nvml"`` or ``"none"``."""

    def __init__(self, cards: tuple[device.SimGpu, ...] = ()) -> None:
        self.cards = cards
        self.kind = "sim" if cards else "nvml"
        self._lock = threading.Lock()
        self._nvml: dict[str, Any] = {}  # uuid -> DeviceTruth (or None: that uuid has none)
        self._devices: Any = None  # the Nvml handle of floor readings (False: none)

    def sim(self, index: int = 0) -> device.SimGpu | None:
        """The simulated card standing for CUDA device ``index`` (None: not simulated)."""
        return self.cards[index] if index < len(self.cards) else None

    def uuid(self, index: int) -> str | None:
        """The card of CUDA device ``index``: the simulated one's, else torch's (only once
        torch has initialised CUDA here: asking never creates a context)."""
        if self.cards:
            return self.cards[index].uuid if index < len(self.cards) else None
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_initialized():
            return None
        return device.cuda_uuid(index)

    def free(self, dev: Any) -> int | None:
        """True free bytes of torch device ``dev``; None where no truth reads it."""
        if self.cards:
            return int(self.cards[0].free())
        if getattr(dev, "type", None) != "cuda":
            return None
        try:
            uuid = device.cuda_uuid(dev.index or 0)
            mem = self._device_truth(uuid).memory() if uuid else None
        except Exception:
            return None
        return int(mem["free"]) if mem else None

    def _device_truth(self, uuid: str) -> Any:
        with self._lock:
            if uuid not in self._nvml:
                self._nvml[uuid] = device.DeviceTruth.open(uuid)
            return self._nvml[uuid]

    def memory(self, uuid: str) -> device.NvmlMemory | None:
        """The card ``uuid``'s memory now, device-wide (``uuid``, ``total``, ``free``,
        ``used``): a simulated card's own numbers, else NVML's (None without NVML)."""
        for sim in self.cards:
            if sim.uuid == uuid:
                total, free = int(sim.total), int(sim.free())
                return {"uuid": uuid, "total": total, "free": free, "used": total - free}
        if self.cards:
            return None
        return self._device_truth(uuid).memory()  # type: ignore[no-any-return]

    def nvml_devices(self) -> list[device.NvmlDevice] | None:
        """Every NVML device with its processes (None without NVML), through one handle kept
        for this process."""
        with self._lock:
            if self._devices is None:
                self._devices = device.Nvml.open() or False
            nvml = self._devices
        return nvml.devices() if nvml else None  # type: ignore[return-value]


_TRUTH: list[Truth] = []
_TRUTH_LOCK = threading.Lock()


def truth() -> Truth:
    """This process's device truth, chosen on the first call."""
    with _TRUTH_LOCK:
        if not _TRUTH:
            paths = settings.get().sim_gpu
            _TRUTH.append(Truth(tuple(device.SimGpu.open(p) for p in paths)))
        return _TRUTH[0]


class Card:
    """One device as this process reads it."""

    def __init__(self, dev: Any) -> None:
        import torch

        self.device = torch.device(dev)

    def true_free(self) -> int:
        """Free bytes, every process counted: the truth, else upstream's own reading."""
        free = truth().free(self.device)
        if free is not None:
            return free
        return int(sys.modules["comfy.model_management"].get_free_memory(self.device))

    def blind_term(self) -> int:
        """``seen_free - true_free`` for this process: zero where the reading is device-wide
        (or there is no truth to correct against)."""
        t = truth()
        sim = t.sim()
        if sim is not None:
            return int(sim.free_seen_by(os.getpid())) - int(sim.free())
        if self.device.type != "cuda" or not _blind_platform():
            return 0
        true = t.free(self.device)
        if true is None:
            return 0
        return self.seen_free() - true

    def seen_free(self) -> int:
        """What this process reads as free through CUDA (blind to others under WDDM)."""
        sim = truth().sim()
        if sim is not None:
            return int(sim.free_seen_by(os.getpid()))
        import torch

        free, _ = torch.cuda.mem_get_info(self.device)
        return int(free)


_CARDS: dict[str, Card] = {}


def card(dev: Any) -> Card:
    """The :class:`Card` of ``dev`` (``"cuda:0"``, a ``torch.device``), one per device."""
    key = str(dev)
    c = _CARDS.get(key)
    if c is None:
        c = _CARDS.setdefault(key, Card(dev))
    return c


def my_device_uuid(index: int | None = None) -> str | None:
    """The UUID of CUDA device ``index`` (default: the current one) as this process sees it, to
    check that the host and a worker mean the same card (:func:`device.resolve_device`): a
    simulated card's where one stands for the GPU (several: one per device, in order), else
    torch's, and only once torch has initialised CUDA here. ``None`` when this process has no
    such device."""
    if index is None:
        torch = sys.modules.get("torch")
        cuda = torch is not None and torch.cuda.is_initialized()
        index = int(torch.cuda.current_device()) if cuda else 0
    return truth().uuid(index)

"""Type stubs: the simulated GPU, the NVML reader and host RAM of ``comfy_airlock._native``
(``crates/airlock-sim``, ``crates/airlock-device``), which ``comfy_airlock.device`` wraps. A
stub-only module: ``comfy_airlock._native`` re-exports every name, and that is where they live
at run time.
"""

import os
from typing import final

from comfy_airlock._native import AirlockError
from comfy_airlock.device import (
    Demotions,
    HostRam,
    NvmlDevice,
    NvmlMemory,
    ProcessView,
    WddmParams,
)

SIM_GPU_ENV: str
"""``AIRLOCK_SIM_GPU``: the simulated cards' paths, handed to workers and the fake NVML."""
SIM_SEMANTICS_ENV: str
"""``AIRLOCK_SIM_SEMANTICS``: the semantics of new simulated cards."""
NVML_LIBRARY_ENV: str
"""``AIRLOCK_NVML_LIBRARY``: another NVML library than the driver's."""

class DeviceError(AirlockError):
    """An error of a loaded NVML, or of the simulated GPU."""

class SimOutOfMemory(DeviceError):
    """A checked booking did not fit, as a CUDA allocation would fail."""

    pid: int
    tag: str
    requested: int
    free: int

class DeviceMismatch(DeviceError):
    """A worker's device is not the host's (by UUID)."""

    pack: str
    host_uuid: str
    worker_uuid: str

@final
class SimGpu:
    """A simulated card shared by every process that opens its file (tests only: ADR 0006)."""

    @staticmethod
    def create(
        path: str | os.PathLike[str],
        total: int,
        name: str = "sim0",
        uuid: str | None = None,
        semantics: str | None = None,
    ) -> SimGpu:
        """Creates a card of ``total`` bytes at ``path`` (which must not exist); ``semantics``
        is ``"device_wide"``, ``"wddm"`` or ``"wddm:key=value,..."`` (None:
        ``AIRLOCK_SIM_SEMANTICS``, else device-wide)."""
    @staticmethod
    def open(path: str | os.PathLike[str]) -> SimGpu:
        """Opens the card at ``path``."""
    @staticmethod
    def from_env() -> SimGpu | None:
        """Opens the card named by ``AIRLOCK_SIM_GPU``; None when it is unset."""
    @property
    def path(self) -> str:
        """The card's file."""
    @property
    def uuid(self) -> str:
        """Its UUID in NVML's spelling."""
    @property
    def name(self) -> str:
        """Its name, as NVML reports it."""
    @property
    def total(self) -> int:
        """Its memory in bytes."""
    @property
    def semantics(self) -> str:
        """``"device_wide"`` or ``"wddm"``."""
    @property
    def semantics_spec(self) -> str:
        """The semantics with their parameters, as ``create`` reads them back."""
    @property
    def wddm(self) -> WddmParams | None:
        """The WDDM parameters; None on a device-wide card."""
    def used(self) -> int:
        """Bytes booked by every process."""
    def free(self) -> int:
        """``total - used``, never below zero: the truth, what NVML reports."""
    def free_seen_by(self, pid: int) -> int:
        """What ``pid`` reads as free under the card's semantics."""
    def mem_get_info(self, pid: int) -> tuple[int, int]:
        """``(free_seen_by(pid), total)``: ``torch.cuda.mem_get_info`` in ``pid``."""
    def overcommitted(self) -> int:
        """Bytes booked past the total."""
    def attach(self, pid: int) -> bool:
        """``pid`` starts on the card; returns whether it was a start (WDDM)."""
    def repartition(self) -> None:
        """A re-partition event (WDDM)."""
    def repartitions(self) -> int:
        """Re-partition events so far."""
    def demotions(self, pid: int) -> Demotions:
        """What over-admission cost ``pid``."""
    def demotions_total(self) -> Demotions:
        """Demotions summed over every process ever attached."""
    def process_views(self) -> list[ProcessView]:
        """Every process on the card, ascending by pid."""
    def processes_attached(self) -> int:
        """Processes attached (WDDM)."""
    def book(self, pid: int, tag: str, nbytes: int) -> int:
        """Sets the booking of ``(pid, tag)``; returns the previous value."""
    def book_checked(self, pid: int, tag: str, nbytes: int) -> int:
        """``book``, raising ``SimOutOfMemory`` when the growth does not fit."""
    def add(self, pid: int, tag: str, delta: int) -> int:
        """Adds ``delta`` bytes (negative frees); returns the new value."""
    def release(self, pid: int, tag: str) -> int:
        """Drops ``(pid, tag)``; returns the bytes it held."""
    def release_process(self, pid: int) -> int:
        """Drops every booking of ``pid``; returns the bytes released."""
    def reap(self) -> list[int]:
        """Drops the bookings of pids no longer running; returns those pids."""
    def used_by(self, pid: int) -> int:
        """Bytes booked by ``pid``."""
    def bookings(self) -> list[tuple[int, str, int]]:
        """``[(pid, tag, bytes)]``, every booking with bytes."""
    def processes(self) -> list[tuple[int, int]]:
        """``[(pid, bytes)]`` summed over tags: what NVML lists."""
    def slots_in_use(self) -> int:
        """Booking slots not free (a leak shows here)."""

@final
class Nvml:
    """An initialised NVML, kept open for repeated reads."""

    @staticmethod
    def open(library: str | os.PathLike[str] | None = None) -> Nvml | None:
        """NVML from ``library``, ``AIRLOCK_NVML_LIBRARY`` or the driver's; None when it
        cannot be loaded or initialised."""
    @property
    def library(self) -> str:
        """The library as it was asked for."""
    def devices(self) -> list[NvmlDevice]:
        """Every device, in NVML's order."""
    def memory(self, uuid: str) -> NvmlMemory | None:
        """Memory of the device ``uuid`` (NVML's or torch's spelling); None if unknown."""

@final
class DeviceTruth:
    """NVML's reading of one device by UUID, kept open; reads None without a driver."""

    @staticmethod
    def open(uuid: str, library: str | os.PathLike[str] | None = None) -> DeviceTruth:
        """The device ``uuid``; ``DeviceError`` when NVML answers but has no such device."""
    @property
    def uuid(self) -> str:
        """The UUID in NVML's spelling."""
    @property
    def available(self) -> bool:
        """Whether NVML answers."""
    def memory(self) -> NvmlMemory | None:
        """Its memory now, device-wide; None without NVML."""

def nvml_devices(library: str | os.PathLike[str] | None = None) -> list[NvmlDevice] | None:
    """Every NVML device, or None when NVML is unavailable (loads NVML for this one read)."""

def nvml_memory(uuid: str, library: str | os.PathLike[str] | None = None) -> NvmlMemory | None:
    """Memory of the device ``uuid``, or None when NVML is unavailable or has no such device."""

def resolve_device(host_uuid: str, workers: list[tuple[str, str]]) -> str:
    """The UUID the host and every worker ``(pack, uuid)`` share; ``DeviceMismatch`` naming
    the first pack on another card."""

def host_ram() -> HostRam:
    """Host RAM as this process's memory cgroup limits it."""

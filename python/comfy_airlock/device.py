"""Device truth: the NVML reader, host RAM, and the simulated GPU tests run on (a typed wrapper
over the Rust crates ``airlock-device`` and, for the simulated GPU, ``airlock-sim``).

NVML is read in-process through ``dlopen`` of ``libnvidia-ml.so.1`` (no pip package), and
devices are resolved by UUID, on which CUDA and NVML agree (their orders differ):
:func:`resolve_device` checks that the host and every worker are on one card (else
:class:`DeviceMismatch`, naming the pack), and a :class:`DeviceTruth` keeps NVML open to read
that card's memory device-wide (``comfy_airlock.card`` keeps one per device for the process).
Where NVML cannot be loaded or initialised (no NVIDIA driver), every reader returns ``None``:
callers degrade to upstream's own semantics.
:data:`NVML_LIBRARY_ENV` names another library. :func:`host_ram` is host RAM as this process's
memory cgroup limits it (v2, v1, else the machine).

A :class:`SimGpu` is a card in a small shared file that every process opening it books its
"VRAM" on: the host, its workers, and the fake ``libnvidia-ml.so.1`` built from
``crates/airlock-fake-nvml``, which reports the card named by :data:`SIM_GPU_ENV`. Tests create
a card, hand its path to workers in that variable, and answer the host's free-memory reading for
a fake ``cuda:0`` with :meth:`SimGpu.free_seen_by` (``os.getpid()``); the product never patches
the host. See ``docs/adr/0006-simulated-gpu.md``::

    card = SimGpu.create(tmp / "gpu", total=16 << 30)
    card.book(os.getpid(), "model-1", 4 << 30)        # set, idempotent
    card.free()                                        # 12 GiB, in every process
    SimGpu.from_env()                                  # in a worker, from SIM_GPU_ENV

A card's semantics are fixed at creation (``semantics=``, else :data:`SIM_SEMANTICS_ENV`, else
device-wide). Device-wide, every process reads the truth. On ``"wddm"`` (Windows), each process
reads its own budget (``free_seen_by(pid)``): debited 1:1 by its own bookings, blind to other
processes' until a re-partition (a process attaching or exiting), with the seed's measured
biases; ``free()`` and the fake NVML stay the truth. Booking past the card's total never fails
there: it demotes a bystander, counted by :meth:`SimGpu.demotions`. See
``docs/adr/0008-wddm-simulation.md``::

    card = SimGpu.create(tmp / "gpu", 16 << 30, semantics="wddm")
    card.attach(host)                                  # the host's CUDA context
    card.book(worker, "model", 12 << 30)               # the host does not see this...
    card.free_seen_by(host)                            # ...16 GiB, while free() is 4 GiB
    card.book(host, "model", 6 << 30)                  # over-admitted:
    card.demotions(worker)                             # {"count": 1, "bytes": 2 GiB}
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Literal, TypedDict, cast

from comfy_airlock import _native
from comfy_airlock._native import (
    DeviceError,
    DeviceMismatch,
    DeviceTruth,
    Nvml,
    SimGpu,
    SimOutOfMemory,
)

__all__ = [
    "NVML_LIBRARY_ENV",
    "SIM_GPU_ENV",
    "SIM_SEMANTICS_ENV",
    "Demotions",
    "DeviceError",
    "DeviceMismatch",
    "DeviceTruth",
    "HostRam",
    "Nvml",
    "NvmlDevice",
    "NvmlMemory",
    "NvmlProcess",
    "ProcessView",
    "SimGpu",
    "SimOutOfMemory",
    "WddmParams",
    "cuda_uuid",
    "host_ram",
    "nvml_devices",
    "nvml_memory",
    "resolve_device",
]

#: The environment variable naming a simulated card's file (the core's name). Several
#: paths separated by ``:`` make several cards for the fake NVML, in that order.
SIM_GPU_ENV: str = _native.SIM_GPU_ENV

#: The environment variable with the semantics of cards created without explicit ones
#: (the core's name): ``device_wide`` (unset), ``wddm`` or ``wddm:key=value,...``.
SIM_SEMANTICS_ENV: str = _native.SIM_SEMANTICS_ENV

#: The environment variable naming the NVML library to load instead of the driver's
#: (the core's name): how a test points a whole process at the fake one.
NVML_LIBRARY_ENV: str = _native.NVML_LIBRARY_ENV


class NvmlMemory(TypedDict):
    """A device's memory in bytes, device-wide (every process's allocations count)."""

    uuid: str
    """The device's UUID in NVML's spelling."""
    total: int
    """Bytes."""
    free: int
    """Bytes free, every process counted."""
    used: int
    """Bytes used."""


class NvmlProcess(TypedDict):
    """A process with a compute context."""

    pid: int
    """Its pid."""
    used: int | None
    """Its bytes; ``None`` where the driver cannot tell (Windows WDDM)."""


class NvmlDevice(NvmlMemory):
    """One device NVML knows."""

    name: str
    """The device's name."""
    processes: list[NvmlProcess] | None
    """Its processes; ``None`` where the driver cannot list them."""


class WddmParams(TypedDict):
    """A WDDM card's parameters (``SimGpu.wddm``), in bytes."""

    pinned_bias: int
    """Reading minus true free memory for a budget pinned at the process's start (seed:
    -583 MB)."""
    repartition_bias: int
    """Reading minus true free memory just after a re-partition (seed: +533 MB)."""
    repartition_below: int
    """The true free memory under which an allocation re-partitions (0: never)."""


class Demotions(TypedDict):
    """What over-admission cost a process on a WDDM card."""

    count: int
    """Times its memory was demoted to shared system memory."""
    bytes: int
    """Bytes demoted."""


class ProcessView(TypedDict):
    """One process on a simulated card (``SimGpu.process_views``)."""

    pid: int
    """Its pid."""
    used: int
    """Bytes it has booked."""
    free_seen: int
    """What it reads as free (its budget on WDDM)."""
    repartitioned: bool
    """Whether a re-partition set its budget (WDDM)."""
    demotions: int
    """Times it was demoted (WDDM)."""
    demoted_bytes: int
    """Bytes demoted (WDDM)."""


class HostRam(TypedDict):
    """Host RAM in bytes as this process may use it."""

    total: int
    """The binding cgroup's limit, else the machine's memory."""
    used: int
    """Bytes used (page cache included)."""
    available: int
    """Bytes available."""
    source: Literal["cgroup_v2", "cgroup_v1", "machine"]
    """What binds it."""
    cgroup: str | None
    """The binding cgroup's directory; ``None`` for the machine."""


def nvml_devices(library: str | os.PathLike[str] | None = None) -> list[NvmlDevice] | None:
    """Every NVML device in NVML's order, or ``None`` when NVML is unavailable.

    Loads and initialises NVML for this one read; keep an :class:`Nvml` (``Nvml.open()``) for
    repeated reads. Raises :class:`DeviceError` when a loaded NVML fails.
    """
    return cast("list[NvmlDevice] | None", _native.nvml_devices(library))


def nvml_memory(uuid: str, library: str | os.PathLike[str] | None = None) -> NvmlMemory | None:
    """Memory of the device with ``uuid`` (``GPU-...``, or torch's spelling without the
    prefix), or ``None`` when NVML is unavailable or has no such device."""
    return cast("NvmlMemory | None", _native.nvml_memory(uuid, library))


def resolve_device(
    host_uuid: str, workers: Mapping[str, str] | Iterable[tuple[str, str]] = ()
) -> str:
    """The device UUID (NVML's spelling) the host and every worker share. ``workers`` maps each
    pack to its worker's device UUID (NVML's or torch's spelling). Raises
    :class:`DeviceMismatch` (``.pack``, ``.host_uuid``, ``.worker_uuid``) for the first pack
    whose worker is on another card."""
    pairs = workers.items() if isinstance(workers, Mapping) else workers
    return _native.resolve_device(host_uuid, [(str(p), str(u)) for p, u in pairs])


def host_ram() -> HostRam:
    """Host RAM as this process may use it: its memory cgroup's limit and usage where a limit
    binds (v2 ``memory.max``/``memory.current``, v1 ``memory.limit_in_bytes``/
    ``memory.usage_in_bytes``, reclaimable file cache not counted as used), else the machine's
    ``/proc/meminfo``. Raises :class:`DeviceError` when ``/proc/meminfo`` cannot be read."""
    return cast("HostRam", _native.host_ram())


def cuda_uuid(index: int = 0) -> str | None:
    """NVML's UUID (``GPU-...``) of CUDA device ``index`` as torch sees it (after
    ``CUDA_VISIBLE_DEVICES``), or ``None`` without torch or CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        return None
    uuid = str(torch.cuda.get_device_properties(index).uuid)
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"

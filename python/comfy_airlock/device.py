"""Device truth: the NVML reader, and the simulated GPU tests run on (a typed wrapper over the
Rust crate ``airlock-device``).

NVML is read in-process through ``dlopen`` of ``libnvidia-ml.so.1`` (no pip package), and
devices are resolved by UUID, on which CUDA and NVML agree (their orders differ). Where NVML
cannot be loaded or initialised (no NVIDIA driver), every reader returns ``None``: callers
degrade to upstream's own semantics. ``AIRLOCK_NVML_LIBRARY`` names another library.

A :class:`SimGpu` is a card in a small shared file that every process opening it books its
"VRAM" on: the host, its workers, and the fake ``libnvidia-ml.so.1`` built from
``crates/airlock-fake-nvml``, which reports the card named by ``AIRLOCK_SIM_GPU``. Tests create
a card, hand its path to workers in that variable, and answer the host's free-memory reading for
a fake ``cuda:0`` with :meth:`SimGpu.free_seen_by`; the product never patches the host. See
``docs/adr/0006-simulated-gpu.md``::

    card = SimGpu.create(tmp / "gpu", total=16 << 30)
    card.book(os.getpid(), "model-1", 4 << 30)        # set, idempotent
    card.free()                                        # 12 GiB, in every process
    SimGpu.from_env()                                  # in a worker with AIRLOCK_SIM_GPU set
"""

from __future__ import annotations

import os
from typing import TypedDict, cast

from comfy_airlock import _native
from comfy_airlock._native import DeviceError, Nvml, SimGpu, SimOutOfMemory

__all__ = [
    "NVML_LIBRARY_ENV",
    "SIM_GPU_ENV",
    "DeviceError",
    "Nvml",
    "NvmlDevice",
    "NvmlMemory",
    "NvmlProcess",
    "SimGpu",
    "SimOutOfMemory",
    "cuda_uuid",
    "nvml_devices",
    "nvml_memory",
]

#: The environment variable naming a simulated card's file (``"AIRLOCK_SIM_GPU"``). Several
#: paths separated by ``:`` make several cards for the fake NVML, in that order.
SIM_GPU_ENV: str = _native.SIM_GPU_ENV

#: The environment variable naming the NVML library to load instead of the driver's
#: (``"AIRLOCK_NVML_LIBRARY"``): how a test points a whole process at the fake one.
NVML_LIBRARY_ENV: str = _native.NVML_LIBRARY_ENV


class NvmlMemory(TypedDict):
    """A device's memory in bytes, device-wide (every process's allocations count)."""

    uuid: str
    total: int
    free: int
    used: int


class NvmlProcess(TypedDict):
    """A process with a compute context; ``used`` is ``None`` where the driver cannot tell
    (Windows WDDM)."""

    pid: int
    used: int | None


class NvmlDevice(NvmlMemory):
    """One device. ``processes`` is ``None`` where the driver cannot list them."""

    name: str
    processes: list[NvmlProcess] | None


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

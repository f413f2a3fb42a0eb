"""The worker's floor: device memory it holds that no model accounts for (its CUDA context,
library kernels, cuBLAS workspaces), measured once after warm-up.

Why measured: comfy-env charges every worker a guessed constant for a CUDA context, including
CPU-only workers that never create one (notes/comfy-env.md §3). The seed asks for the floor
measured instead, once, after warm-up; it is a floor, not a truth source (allocations outside
torch move it), so the host still decides from NVML's device-wide truth, and shows the floor
beside each worker's models in its ledger.

How: NVML lists the processes holding a context on each device and what each uses. Until this
process appears there it has no floor to measure (``None``, not 0: it may create a context
later). The first report after it does — the end of the call that created the context, when
its libraries have loaded — measures ``used - max(torch's reserved bytes, the resident bytes of
the models this worker tracks on the device)``, and that number stays. Under WDDM NVML reports
no per-process memory, so the floor stays unmeasured there, as it honestly is.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

from comfy_airlock import settings
from comfy_airlock.card import truth

#: Seconds between attempts, and how many, when this process has a context that NVML does not
#: list (a container's own pid namespace).
RETRY_S = 5.0
ATTEMPTS = 3

_STATE: dict[str, float | int | bool | None] = {
    "floor": None,
    "next_try": 0.0,
    "attempts": 0,
    "sim": None,  # a simulated card stands for the GPU (read once)
}


def floor(tracked_resident: Callable[[], int]) -> int | None:
    """This worker's floor in bytes, measured on the first call that can (see the module doc),
    or None while it cannot be. ``tracked_resident``: bytes of the worker's tracked models on
    the device."""
    measured = _STATE["floor"]
    if measured is not None:
        return int(measured)
    now = time.monotonic()
    attempts = int(_STATE["attempts"] or 0)
    if attempts >= ATTEMPTS or now < float(_STATE["next_try"] or 0.0):
        return None
    if not _may_have_context():
        return None
    _STATE["next_try"] = now + RETRY_S
    _STATE["attempts"] = attempts + 1
    used = _used_by_me()
    if used is None:
        return None
    _STATE["floor"] = max(0, used - max(_reserved(), tracked_resident()))
    return int(_STATE["floor"])


def due(cuda: bool) -> bool:
    """Whether a report made now could measure the floor: unmeasured, attempts left, a context
    possible (``cuda``: torch has initialised CUDA here), the retry delay over. Cheap checks
    first: this runs after every call."""
    st = _STATE
    if st["floor"] is not None:
        return False
    if not cuda and not (st["sim"] if st["sim"] is not None else _on_sim()):
        return False
    if int(st["attempts"] or 0) >= ATTEMPTS or time.monotonic() < float(st["next_try"] or 0.0):
        return False
    return _may_have_context()


def _on_sim() -> bool:
    """Whether a simulated card stands for the GPU here (settings are read once per process,
    so the answer is kept: this runs after every call)."""
    sim = _STATE.get("sim")
    if sim is None:
        sim = _STATE["sim"] = bool(settings.get().sim_gpu)
    return bool(sim)


def _may_have_context() -> bool:
    """Cheap gate before loading NVML: torch has initialised CUDA here, or, where a simulated
    card stands for the GPU (tests, benchmarks; the fake NVML reports it), this process is on
    it."""
    sim = truth().sim()
    if sim is not None:
        return any(pid == os.getpid() for pid, _ in sim.processes())
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.cuda.is_initialized())


def _used_by_me() -> int | None:
    try:
        devices = truth().nvml_devices()
    except Exception:
        return None
    me = os.getpid()
    for d in devices or ():
        for p in d.get("processes") or ():
            if p["pid"] == me:
                return None if p["used"] is None else int(p["used"])
    return None


def _reserved() -> int:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return int(torch.cuda.memory_reserved())
    return 0

"""The worker's share of host RAM: its pin ceiling and cache headroom, set by the host.

Upstream sizes its pinned-memory ceiling (``MAX_PINNED_MEMORY``) at import as if its process
were alone on the machine; every worker runs its own ``comfy.model_management``, so five
processes would each believe they may page-lock 90 % of RAM. The host splits one budget across
itself and its workers (``comfy_airlock.host.memory.ram``) and sends each worker its ceiling on the
control lane; here it becomes this worker's own ``MAX_PINNED_MEMORY`` (our copy of ComfyUI,
never the host's), and when it falls below what is registered, upstream's own ladder
(``ensure_pin_registerable``: ``free_registrations`` over its eviction tiers) unregisters pins
down to it. Pinning that upstream left off (``MAX_PINNED_MEMORY <= 0``: no NVIDIA/AMD device,
``--disable-pinned-memory``) stays off: the ceiling only ever lowers upstream's own value.

The host's RAM cache headroom (``RAM_CACHE_HEADROOM``, set by its executor for the prompt that
runs) is mirrored as this worker's, which runs no executor: upstream's ``ensure_pin_budget``
keeps ``max(headroom / 2, 2 GiB)`` of RAM available, and with the host's headroom a worker
stops pinning where the host would, instead of 2 GiB lower. Its release callback stays None:
worker results live in the host's cache.

Upstream's pin bookkeeping has no lock, so it is only changed where upstream changes it, on the
thread running a call, or while no call runs: a ceiling that arrives during a call is applied
(written, and freed down to) when the call ends.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

_GATE = threading.Lock()
_STATE: dict[str, Any] = {
    "busy": 0,  # calls running (changed by the calling thread only)
    "pending": False,  # a command arrived during a call: settle when it ends
    "settling": False,  # the control thread is settling now
    "ceiling": None,  # the last ceiling from the host (bytes)
    "headroom": None,  # the host's cache headroom (bytes)
    "upstream": None,  # MAX_PINNED_MEMORY as upstream computed it, read at first use
    "applied": None,  # the ceiling last written into MAX_PINNED_MEMORY
    "hooked": False,  # a settle waits for comfy.model_management's import
}


def _mm() -> Any:
    return sys.modules.get("comfy.model_management")


def pinned() -> int:
    """Bytes this worker's ComfyUI has page-locked (upstream's running total; 0 without it)."""
    mm = _mm()
    return max(0, int(getattr(mm, "TOTAL_PINNED_MEMORY", 0) or 0)) if mm is not None else 0


def rss() -> int | None:
    """This process's resident set in bytes (None where /proc cannot say)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def ceiling() -> int | None:
    """The ceiling in force in this worker's ComfyUI (None: not applied, or pinning is off)."""
    return _STATE["applied"]


def command(op: str, arg: float) -> int:
    """A ``pin_ceiling`` or ``cache_headroom`` command (the control thread); returns the bytes
    of registrations freed now (0 when deferred to the end of the running call)."""
    with _GATE:
        _STATE["ceiling" if op == "pin_ceiling" else "headroom"] = max(0, int(arg))
        # Pending before busy is read, and busy raised before settling is read (enter): under
        # the GIL one of the two threads always sees the other, so a settle is never lost
        # and never overlaps a call.
        _STATE["settling"] = _STATE["pending"] = True
        try:
            if _STATE["busy"]:
                return 0  # the call's leave() settles
            _STATE["pending"] = False
            return _settle()
        finally:
            _STATE["settling"] = False


def enter() -> None:
    """A call starts (its thread): pins are upstream's to change until it ends. No lock unless
    a settle is running (this is on every call's path)."""
    _STATE["busy"] += 1
    if _STATE["settling"]:
        with _GATE:  # let the control thread's settle finish first
            pass


def leave() -> None:
    """A call ended (its thread): what arrived meanwhile applies now."""
    busy = _STATE["busy"] - 1
    _STATE["busy"] = busy if busy > 0 else 0  # not max(): a builtin call costs more, per call
    if _STATE["pending"] and not _STATE["busy"]:
        with _GATE:
            if _STATE["pending"]:
                _STATE["pending"] = False
                _settle()


def _settle() -> int:
    """Writes the host's numbers into this worker's ComfyUI and frees registrations down to
    the ceiling through upstream's ladder. Holds ``_GATE``."""
    mm = _mm()
    if mm is None:
        # Not imported yet (a worker loads ComfyUI at its first scan or call): settle at the
        # end of the call that imports it.
        _settle_when_imported()
        return 0
    headroom = _STATE["headroom"]
    mem = sys.modules.get("comfy.memory_management")
    if headroom is not None and mem is not None and hasattr(mem, "RAM_CACHE_HEADROOM"):
        mem.RAM_CACHE_HEADROOM = headroom
    cap = _STATE["ceiling"]
    if cap is None:
        return 0
    if _STATE["applied"] is None:
        # Upstream's own value until we first write ours (read again each time until then:
        # pinning may be turned on after import, as the GPU edge of the tests does).
        _STATE["upstream"] = float(getattr(mm, "MAX_PINNED_MEMORY", -1))
    upstream = _STATE["upstream"]
    if upstream <= 0:
        return 0  # pinning is off here: never turned on by us
    limit = min(cap, int(upstream))
    before = pinned()
    if before > limit:
        # Upstream's ladder returns at once with MAX_PINNED_MEMORY <= 0, so it runs under at
        # least one byte; a zero ceiling is set after, and upstream then pins nothing.
        mm.MAX_PINNED_MEMORY = max(1, limit)
        _free_registrations(mm, before - limit)
    mm.MAX_PINNED_MEMORY = limit
    _STATE["applied"] = limit
    return max(0, before - pinned())


def _settle_when_imported() -> None:
    if not _STATE.get("hooked"):
        from comfy_airlock.worker.on_import import after_import

        _STATE["hooked"] = True
        after_import("comfy.model_management", lambda _mm: _STATE.__setitem__("pending", True))


def _free_registrations(mm: Any, shortfall: int) -> None:
    """Upstream's registration ladder (``free_registrations``: its tiers, inactive models
    first) for exactly ``shortfall`` bytes: upstream adds 2 GiB of hysteresis when it needs
    room for a registration of its own, which a lowered ceiling does not call for."""
    tiers = getattr(mm, "registration_eviction_tiers", None)
    free = getattr(mm, "free_model_pins", None)
    if tiers is None or free is None:  # another upstream: its own entry point
        mm.ensure_pin_registerable(0)
        return
    for subsets, current_prompt, active in tiers(True):
        if shortfall <= 0:
            return
        shortfall -= free(shortfall, subsets, current_prompt, active, registrations=True)

"""The reserve: one number that makes the host's own loads see what workers hold.

On a platform whose free-memory reading is blind to other processes (WDDM), upstream's
``load_models_gpu`` in the host would admit a load into memory a worker already holds. Upstream
adds ``extra_reserved_memory()`` (``EXTRA_RESERVED_VRAM``) to everything it asks to free and to
the minimum it keeps free, so publishing ``base + (blind_free - true_free)`` there is a change of
variables: upstream, reading its blind view, then targets the true free memory. The term is
never clamped (just after a re-partition the blind view reads *above* the truth) and excludes
the host's allocator cache (``mem_get_info`` does not count it). On a device-wide platform the
term is zero and nothing is written: publishing worker residency there would double-book it.

It grows at once (the heartbeat too), so a worker's new model is never over-admitted, and
shrinks only on a measured release (a worker freed bytes or exited): a momentary upward bias
of the blind view must not let the host load into memory that is not free. And it shrinks only
where no upstream loop is running, because the stand-ins translate upstream's requests with the
value upstream read (below): on ComfyUI's execution thread at a call boundary
(``heartbeat.sync``), or on the heartbeat once no stand-in has been asked for two
intervals (so that host-only work after a release does not keep a stale reserve). A shrink that
lands inside a slow loop after all errs towards evicting more, never towards over-admission.

The severed feedback loop. Inside upstream's ``free_memory`` the request is
``memory_required - get_free_memory()``, re-read after every eviction; when a stand-in frees
memory in a worker, the host's blind view does not move, so upstream would ask every following
worker model for the same bytes again. :meth:`Reserve.unseen` is what other processes freed
since the term was published (``term_published - term_now``: exactly what the blind view has
not seen, in both WDDM regimes), and a stand-in asked for ``n`` bytes frees ``n - unseen`` —
nothing once the truth suffices — and answers in upstream's terms. Device-wide, ``unseen`` is 0.

This number (and aimdo's headroom where aimdo runs) is the only thing besides the stand-ins
that comfy-airlock writes into the host's ComfyUI. The ``reserve`` setting off publishes nothing
and translates nothing (the term is still computed and reported): the switch the scenarios use
to show what the host does without it (docs/memory.md), and an escape hatch.

The rule (:class:`BlindTermRule`: when a fresh term replaces the one in force) is pure; the
:class:`Reserve` around it only reads the card and writes the two numbers.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from comfy_airlock import settings
from comfy_airlock.card import card, truth


@dataclass
class BlindTermRule:
    """When a fresh term replaces the one in force: at once when it grows; when it shrinks,
    only at a moment no upstream loop runs (``shrink``) and after a measured release."""

    term: int = 0
    released: bool = False

    def take(self, fresh: int, shrink: bool) -> int:
        if fresh > self.term or (shrink and self.released):
            self.term = fresh
        if shrink:
            self.released = False  # a release is measured into the term once
        return self.term


class Reserve:
    """The rule in force, published into the host's ComfyUI."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rule = BlindTermRule()
        self.base: int | None = None  # EXTRA_RESERVED_VRAM before we first wrote it
        self.published: int | None = None  # what we last wrote there
        self._asked = 0.0  # when a stand-in last translated a request (monotonic)

    def released(self) -> None:
        """A release was measured (a stand-in freed bytes, a worker went away)."""
        with self._lock:
            self.rule.released = True

    def update(self, term: int, shrink: bool = False) -> int:
        """Takes a fresh ``blind_free - true_free`` and publishes; returns the term in force.
        ``shrink``: no upstream loop can be running (a call boundary on ComfyUI's thread, or a
        quiet heartbeat), so a measured release may lower the term."""
        mm = sys.modules.get("comfy.model_management")
        with self._lock:
            term = self.rule.take(term, shrink)
            if mm is None or not settings.get().reserve:
                return term
            if self.base is None:
                if term == 0:
                    return 0  # device-wide (or nothing held): never touch the host's number
                self.base = int(mm.EXTRA_RESERVED_VRAM)
            value = max(0, self.base + term)
            mm.EXTRA_RESERVED_VRAM = value
            self.published = value
            publish_aimdo(self.base, term)
            return term

    def published_term(self) -> int:
        """The term inside the number upstream reads now (0 while nothing is published)."""
        with self._lock:
            if self.base is None or self.published is None:
                return 0
            return self.published - self.base

    def unseen(self, device: Any) -> int:
        """Bytes other processes freed on ``device`` since the published term was measured,
        which the host's blind reading has not seen (negative: they took more). 0 when the
        reserve is off or the reading is device-wide."""
        if not settings.get().reserve or str(device) != reserve_device():
            return 0  # the published term is measured on the host's device only
        with self._lock:
            self._asked = time.monotonic()
        return self.published_term() - card(device).blind_term()

    def quiet(self, seconds: float) -> bool:
        """No stand-in has translated a request for ``seconds``: no upstream loop over worker
        models is running (as far as the bridge can tell)."""
        with self._lock:
            return time.monotonic() - self._asked >= seconds


def publish_aimdo(base: int, term: int) -> int | None:
    """Where aimdo (DynamicVRAM) runs in the host and reads memory pressure through CUDA
    (``--disable-nvml-pressure``: the same blind view as upstream), its headroom gets the same
    change of variables: ``base + term``, with ``base`` what ``--reserve-vram`` gave it (else
    the reserve's own base, what that flag would set both to). With NVML pressure (aimdo's
    default) aimdo already sees other processes, so nothing is added: that would count every
    worker twice. Returns the headroom set, or None where it is not ours to set."""
    mem = sys.modules.get("comfy.memory_management")
    if mem is None or not getattr(mem, "aimdo_enabled", False):
        return None
    args = getattr(sys.modules.get("comfy.cli_args"), "args", None)
    if args is None or not getattr(args, "disable_nvml_pressure", False):
        return None
    lib = getattr(sys.modules.get("comfy_aimdo.control"), "lib", None)
    if lib is None:
        return None
    reserve_vram = getattr(args, "reserve_vram", None)
    start = base if reserve_vram is None else int(reserve_vram * 1024**3)
    value = max(0, start + term)
    lib.set_simple_vram_headroom(value)
    return value


def reserve_device() -> str | None:
    """The device whose term the reserve publishes: the host's CUDA device (the simulated
    card's ``cuda:0`` in tests), or None without one."""
    if truth().sim() is not None:
        return "cuda:0"
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return f"cuda:{torch.cuda.current_device()}"


def host_blind_term() -> int:
    """``blind_free - true_free`` on the host's device now (0 where nothing is blind)."""
    device = reserve_device()
    return 0 if device is None else card(device).blind_term()


RESERVE = Reserve()

"""A pack's own ``torch.nn.Module`` as a worker model: its residency, the host's evictions of
it, and putting it back when the pack uses it again.

A module becomes a worker model in two ways: the pack registers it
(``comfy_airlock.register_model``), or the pack moves it onto ComfyUI's device and the worker
sees the move (``worker/module_hooks.py``). Either way it is held weakly: a module the pack lets
go of leaves the ledger with it.

Residency is kept per tensor. On a real accelerator it is read from where each tensor is, so a
move by the pack (``.to()``, ``.cuda()``, ``.half().to(...)``) and one by the host's command are
both seen; an unloaded tensor moves to the CPU. On the CPU (ComfyUI's ``--cpu``) nothing moves
and unloading only takes it out of the ledger, as upstream does with its own CPU models; on the
simulated GPU (tests and benchmarks) nothing moves and residency is booked on the simulated card.

**Eviction never breaks a pack.** When the host evicts part of a module, forward pre-hooks are
armed on it and its submodules. The pack's next use of it (``module(x)``, or any submodule's)
first asks the host to admit the bytes coming back (``admit?``, with upstream's formula for a
load of that size, as the worker's own ``load_models_gpu`` does for ComfyUI's models: the user's
``--reserve-vram`` and room to run stay free), loads them, and marks the module in use for the
rest of the call, so the host does not take it away again mid-node. A pack's own ``.to()`` onto
the device does the same work without the question, and the ledger follows it.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import threading
import time
import weakref
from typing import Any

from comfy_airlock.card import truth
from comfy_airlock.worker import admission, link

log = logging.getLogger("comfy_airlock.worker")

# The worker's ledger lock: the host's model commands (control thread), the reports and the
# pack's own loads take it.
LOCK = threading.RLock()
_IDS = itertools.count(1)
SEQ = itertools.count(1)

# A model id per object, for as long as the object lives.
ID_OF: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def id_for(obj: Any) -> int:
    with LOCK:
        i = ID_OF.get(obj)
        if i is None:
            i = next(_IDS)
            ID_OF[obj] = i
        return i


def sim():
    return truth().sim()  # several cards: the first is cuda:0


def _indexed(device: str) -> str:
    """``cuda`` as the tensors on it spell their device (``cuda:<current>``), so residency read
    from ``str(t.device)`` matches."""
    if device != "cuda":
        return device
    import torch

    return f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cuda:0"


def nbytes(t: Any) -> int:
    return t.numel() * t.element_size()


class Module:
    """One pack module known as a worker model."""

    def __init__(self, module: Any, name: str, device: str, auto: bool = False) -> None:
        self.id = id_for(module)
        self.ref = weakref.ref(module)
        self.name = name
        self.device = _indexed(device)
        self.auto = auto  # seen moving onto the device, not registered by the pack
        self.seq = next(SEQ)
        self.last_used = time.time()
        self.in_use = 0
        self.virtual = self.device != "cpu" and sim() is not None
        self.moves = self.device != "cpu" and not self.virtual
        tensors = self._tensors()
        self.size = sum(nbytes(t) for t in tensors)
        # Where nothing moves (the CPU, the simulated card), which tensors count as resident;
        # on a real device that is read from the tensors themselves (``_parts``).
        self.resident_parts = [True] * len(tensors)
        self._hooks: list[Any] = []
        self._seen = (self.size, self.resident)  # what the last report said
        self._book()

    def _tensors(self) -> list[Any]:
        m = self.ref()
        if m is None:
            return []
        return [*m.parameters(), *m.buffers()]

    def _parts(self, tensors: list[Any]) -> list[bool]:
        if self.moves:
            return [str(t.device) == self.device for t in tensors]
        return self.resident_parts

    @property
    def resident(self) -> int:
        tensors = self._tensors()
        return sum(nbytes(t) for t, r in zip(tensors, self._parts(tensors), strict=False) if r)

    def _book(self) -> None:
        if self.virtual:
            sim().book(os.getpid(), f"model-{self.id}", self.resident)

    def _changed(self) -> None:
        """Its residency or size changed: a newer sequence number, the booking, and the put-back
        hooks gone once it is whole."""
        self.seq = next(SEQ)
        self._seen = (self.size, self.resident)
        self._book()
        if self._seen[1] >= self.size:
            self.disarm()

    def _move(self, load: bool, budget: float) -> None:
        """Unloads (or loads back) tensors until ``budget`` bytes have moved."""
        moved = 0
        tensors = self._tensors()
        for i, (t, on) in enumerate(zip(tensors, list(self._parts(tensors)), strict=False)):
            if on == load:
                continue
            if moved >= budget or (load and moved + nbytes(t) > budget):
                break
            if self.moves:
                t.data = t.data.to(self.device if load else "cpu")
            else:
                self.resident_parts[i] = load
            moved += nbytes(t)
        self._changed()

    def free(self, want: int | None) -> None:
        """Unloads tensors until ``want`` bytes are free (everything with None)."""
        self._move(False, math.inf if want is None else want)

    def load(self, budget: float) -> None:
        """Loads tensors back until ``budget`` more bytes are resident (1e32: all)."""
        self._move(True, budget)

    def moved(self) -> bool:
        """The pack moved this module (or a part of it): measures it again. On the CPU and the
        simulated card a move onto the device is all of it back. True: its report changed."""
        tensors = self._tensors()
        if not self.moves:
            self.resident_parts = [True] * len(tensors)
        self.size = sum(nbytes(t) for t in tensors)
        if (self.size, self.resident) == self._seen:
            return False
        self._changed()
        return True

    def forget(self) -> None:
        self.disarm()
        if self.virtual:
            sim().release(os.getpid(), f"model-{self.id}")

    # --- put back on use ------------------------------------------------------------------

    def arm(self) -> None:
        """After an eviction: the pack's next use of the module puts it back first."""
        m = self.ref()
        if m is None or self._hooks or not hasattr(m, "register_forward_pre_hook"):
            return  # not a torch module (a pack's own arrays): nothing calls it
        self._hooks = [sub.register_forward_pre_hook(self._on_use) for sub in m.modules()]

    def disarm(self) -> None:
        hooks, self._hooks = self._hooks, []
        for h in hooks:
            h.remove()

    def _on_use(self, _module: Any, _args: Any) -> None:
        restore(self)


#: Modules put back during the running call, in use until it ends (``models.end_call``).
RESTORED: list[Module] = []


def restore(m: Module) -> None:
    """Puts back what the host evicted of ``m`` before the pack uses it: admitted by the host
    first (outside the lock: the host's answer may evict this worker's other models), then
    loaded, and in use for the rest of the call."""
    missing = m.size - m.resident
    if missing <= 0:
        m.disarm()
        return
    answers = []
    if m.device != "cpu" and link.in_call():
        need, minimum = admission.module_need(missing)
        answers.append(admission.ask("admit?", m.device, need, minimum, [m.id]))
        if answers[0].get("granted") is False:
            log.warning(
                "the host did not admit %d bytes of %s back; loading them as its own "
                "load_models_gpu would",
                missing,
                m.name,
            )
    try:
        with LOCK:
            m.load(1e32)
            m.last_used = time.time()
            if link.in_call():
                m.in_use += 1
                RESTORED.append(m)
    finally:
        admission.loaded(answers)

"""The models a worker holds, what each occupies where, and freeing them on the host's command.

Two kinds of model are known:

- **patchers**: every entry of the worker's own ``comfy.model_management.current_loaded_models``
  (models a pack loaded the ComfyUI way, through ``load_models_gpu``), read at each report;
- **modules**: a ``torch.nn.Module`` a pack keeps outside ComfyUI's loader, found when the pack
  moves it onto ComfyUI's device (``owned.py``, ``module_hooks.py``) or registered with
  :func:`register_model`; one module's record, and putting it back after an eviction when the
  pack next uses it, are ``modules.py``'s.

Each has a size, its resident bytes on its device, and a sequence number bumped whenever its
residency changes, so the host never lets an older report overwrite a newer one. The host's
stand-ins (``comfy_airlock.host.memory.standin``) send commands on the control lane; they run here on
the control thread, also while a node runs, but never on a model the running node uses.

Freed bytes are measured after the fact: for a CUDA device, ``memory_reserved`` before and after
the unload and ``empty_cache``; for a module on the simulated GPU (tests and benchmarks: the
process's device truth, ``comfy_airlock.card``), its booking on the simulated card.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from comfy_airlock import settings
from comfy_airlock.card import my_device_uuid
from comfy_airlock.worker import (
    admission,
    floor,
    interrupts,
    link,
    module_hooks,
    modules,
    owned,
    ram,
    unload_all,
)
from comfy_airlock.worker.on_import import after_import

_LOCK = modules.LOCK
_SEQ = modules.SEQ
_PUBLISH: Any = None  # set by the runtime: publishes a report to the control thread
# Patchers the running call asked ``load_models_gpu`` for (None between calls).
_CALL_USED: set[int] | None = None

# A model id per object, for as long as the object lives (memory-pack reads it).
_ID_OF = modules.ID_OF
_id_for = modules.id_for
_Module = modules.Module

_MODULES: dict[int, _Module] = {}
# Last seen residency of each patcher, to bump its sequence number only on change.
_PATCHER_SEEN: dict[int, tuple[int, int, int]] = {}


def register_model(module: Any, *, name: str | None = None, device: str | None = None) -> int:
    """Makes a pack's own ``torch.nn.Module`` known to ComfyUI's memory manager in the host:
    it appears in ComfyUI's loaded-model list and ComfyUI can evict it like its own. ``device``
    is where it is resident (default: its first parameter's device). Returns its model id.
    A module the pack moves onto ComfyUI's device is found without this (worker/owned.py)."""
    if device is None:
        device = owned.device_of(module) or "cpu"
    with _LOCK:
        m = _Module(module, name or type(module).__name__, device)
        owned.adopt(_MODULES, m)
    publish()
    return m.id


def unregister_model(module: Any) -> None:
    with _LOCK:
        i = _ID_OF.get(module)
        m = _MODULES.pop(i, None) if i is not None else None
        if m is not None:
            owned.release(m)
    if m is not None:
        m.forget()
        publish()


@contextlib.contextmanager
def using(*modules: Any) -> Iterator[None]:
    """Marks registered modules as in use by the running node: they are loaded back if the host
    unloaded them, and the host's commands leave them alone until the block ends."""
    with _LOCK:
        ms = [_MODULES[_ID_OF[m]] for m in modules if _ID_OF.get(m) in _MODULES]
        for m in ms:
            m.in_use += 1
            m.last_used = time.time()
            if m.resident < m.size:
                m.load(1e32)
    try:
        yield
    finally:
        with _LOCK:
            for m in ms:
                m.in_use -= 1
                m.last_used = time.time()


# --- the worker's own ComfyUI ledger ----------------------------------------------------------


def _loaded_models() -> list[Any]:
    mm = sys.modules.get("comfy.model_management")
    if mm is None:
        return []
    return [lm for lm in list(mm.current_loaded_models) if lm.model is not None]


def _used_now() -> set[int]:
    """Patchers the running node asked for: the host must not take them away mid-node."""
    used = _CALL_USED
    return set(used) if used is not None else set()


def _watch_loads() -> None:
    """Records which patchers a node loads, by wrapping this worker's own ``load_models_gpu``
    (our copy of ComfyUI, never the host's)."""
    mm = sys.modules.get("comfy.model_management")
    if mm is None or getattr(mm.load_models_gpu, "_airlock", False):
        return
    original = mm.load_models_gpu
    admitted = admission.admitted_load(original, _id_for, _LOCK)

    def load_models_gpu(models, *args, **kwargs):
        used = _CALL_USED
        if used is not None:
            used.update(_id_for(m) for m in models)
        with owned.quiet():  # ComfyUI's loader moving its own models
            return admitted(models, *args, **kwargs)

    load_models_gpu._airlock = True  # type: ignore[attr-defined]
    load_models_gpu.__wrapped__ = original  # type: ignore[attr-defined]
    mm.load_models_gpu = _LOADER[0] = load_models_gpu


# The wrapper ``_watch_loads`` installed last (a call checks it is still the one in place).
_LOADER: list[Any] = [None]


def _patcher_rows() -> list[dict[str, Any]]:
    rows = []
    for lm in _loaded_models():
        p = lm.model
        owned.claim_patcher(p, _MODULES)
        i = _id_for(p)
        size, resident = int(p.model_size()), int(p.loaded_size())
        device = str(lm.device)
        seen = _PATCHER_SEEN.get(i)
        if seen is None or seen[1:] != (size, resident):
            _PATCHER_SEEN[i] = (next(_SEQ), size, resident)
        name = type(getattr(p, "model", p)).__name__
        rows.append(
            {
                "id": i,
                "name": name,
                "kind": "patcher",
                "device": device,
                "size": size,
                "resident": resident,
                "seq": _PATCHER_SEEN[i][0],
                "last_used": admission.LAST_USED.get(i, 0.0),
                "in_use": False,
            }
        )
    return rows


def _reserved() -> int:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return int(torch.cuda.memory_reserved())
    return 0


def report() -> dict[str, Any]:
    """What this worker holds, for the host's ledger."""
    with _LOCK:
        rows = _patcher_rows()
        busy = _used_now()
        for r in rows:
            r["in_use"] = r["id"] in busy
        for i, m in list(_MODULES.items()):
            if m.ref() is None:
                m.forget()
                del _MODULES[i]
                continue
            rows.append(
                {
                    "id": m.id,
                    "name": m.name,
                    "kind": "module",
                    "device": m.device,
                    "size": m.size,
                    "resident": m.resident,
                    "seq": m.seq,
                    "last_used": m.last_used,
                    "in_use": m.in_use > 0,
                }
            )
        # After every row's: a model this report does not list, known from an older row, was
        # gone when it was made (the host zeroes its stand-in, host/memory/ledger.py).
        seq = next(_SEQ)
    return {
        "pid": os.getpid(),
        "seq": seq,
        "reserved": _reserved(),
        "models": rows,
        # Host RAM (worker/ram.py): its page-locked bytes and resident set.
        "pinned": ram.pinned(),
        "rss": ram.rss(),
        # Device memory no model accounts for, measured once (worker/floor.py); None before.
        "floor": floor.floor(lambda: sum(r["resident"] for r in rows if r["device"] != "cpu")),
        # The card this worker means by its CUDA device (None before it has one): the host
        # checks it is its own (host/memory/ledger.py).
        "device_uuid": _device_uuid(),
    }


_UUID: list[str] = []  # found once: a process's device does not change


def _device_uuid() -> str | None:
    if not _UUID:
        try:
            uuid = my_device_uuid()
        except Exception:
            uuid = None
        if uuid is None:
            return None
        _UUID.append(uuid)
    return _UUID[0]


def publish() -> dict[str, Any]:
    r = report()
    if _PUBLISH is not None:
        _PUBLISH(r)
    return r


# --- commands from the host -------------------------------------------------------------------


def _empty_cache() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _run_patcher(lm: Any, op: str, arg: float) -> int:
    mm = sys.modules["comfy.model_management"]
    before = int(lm.model.loaded_size())
    if op == "partially_load":
        lm.model_use_more_vram(arg)
        return max(0, int(lm.model.loaded_size()) - before)
    if op == "unload" or arg >= before:
        lm.model_unload()
        with contextlib.suppress(ValueError):
            mm.current_loaded_models.remove(lm)
    else:
        lm.model_unload(arg)
    mm.soft_empty_cache()
    return max(0, before - int(lm.model.loaded_size())) if lm.model is not None else before


def execute(model: int, op: str, arg: float) -> tuple[int | None, str | None, dict[str, Any]]:
    """Runs one command from the host; returns (bytes, refusal, report)."""
    if op in ("pin_ceiling", "cache_headroom"):  # for the worker, not a model
        return ram.command(op, arg), None, publish()
    with _LOCK, owned.quiet():
        if model in _MODULES:
            m = _MODULES[model]
            if m.in_use:
                return None, "the running node uses this model", publish()
            reserved = _reserved()
            before = m.resident
            if op == "partially_load":
                if arg < 0:
                    m.free(int(-arg))
                    m.arm()
                else:
                    m.load(arg)
                _empty_cache()
                return max(0, m.resident - before), None, publish()
            m.free(None if op == "unload" else int(arg))
            m.arm()  # the pack's next use puts it back (worker/modules.py)
            _empty_cache()
            freed = before - m.resident
            if not m.virtual and reserved:
                freed = max(freed, reserved - _reserved())
            return max(0, freed), None, publish()
        for lm in _loaded_models():
            if _id_for(lm.model) == model:
                if model in _used_now():
                    return None, "the running node uses this model", publish()
                if op == "partially_load" and arg < 0:
                    return _run_patcher(lm, "partially_unload", -arg), None, publish()
                return _run_patcher(lm, op, arg), None, publish()
    return None, f"this worker holds no model {model}", publish()


_LAST_SENT: dict[str, Any] | None = None


# This file's per-call functions run around every call: module lookups go through a local
# name for ``sys.modules`` (which Python never rebinds), and values fixed once seen are kept.
_MODS = sys.modules


def active() -> bool:
    """Whether this worker can hold models at all (so calls of a worker that cannot skip the
    bookkeeping): it registered a module, or its pack imported ComfyUI's model management."""
    return bool(_MODULES) or "comfy.model_management" in _MODS


def begin_call() -> bool:
    """A call starts: returns :func:`active` (whether its end must be reported), checking on
    the way that this worker's loader is still watched. One function, not two: this runs on
    every call's path."""
    global _CALL_USED
    mm = _MODS.get("comfy.model_management")
    if mm is None:
        if not _MODULES:
            return False
    elif mm.load_models_gpu is not _LOADER[0]:
        _watch_loads()
    _CALL_USED = set()
    return True


def end_call() -> dict[str, Any] | None:
    """Publishes the report after a call; returns it when it changed since the last one sent
    with a reply (or None: the host's ledger is current). A call that changed nothing the report
    says (the usual case: :func:`_signature`) skips making it: the resident set, which moves at
    every call, is kept fresh for the heartbeat by :func:`refresh` while the worker is idle."""
    global _CALL_USED, _LAST_SENT, _LAST_SIG
    _CALL_USED = None
    if modules.RESTORED:
        with _LOCK:
            for m in modules.RESTORED:
                m.in_use -= 1
            modules.RESTORED.clear()
    sig = _signature()
    if sig is not None and sig == _LAST_SIG:
        return None
    _LAST_SIG = sig
    r = publish()
    moving = {"rss": None, "seq": None}
    if _LAST_SENT is not None and {**r, **moving} == {**_LAST_SENT, **moving}:
        return None  # the resident set alone moves at every call: the heartbeat carries it
    _LAST_SENT = r
    return r


_LAST_SIG: tuple[Any, ...] | None = None


def _signature() -> tuple[Any, ...] | None:
    """What a report's content (but its resident set and sequence number) depends on, read
    cheaply (this runs after every call); None when a report must be made anyway (a floor
    measurement is due)."""
    cuda = _cuda_initialized()
    if floor.due(cuda):
        return None
    mm = _MODS.get("comfy.model_management")
    if mm is None:
        cml, pinned = None, 0
    else:
        cml, pinned = mm.current_loaded_models, getattr(mm, "TOTAL_PINNED_MEMORY", 0)
    used = admission.LAST_USED
    return (
        tuple(
            (id(lm.model), lm.model.loaded_size(), str(lm.device))
            for lm in list(cml)
            if lm.model is not None
        )
        if cml
        else (),
        tuple((i, m.seq, m.last_used, m.in_use, m.ref() is None) for i, m in _MODULES.items())
        if _MODULES
        else (),
        tuple(used.items()) if used else (),
        pinned,
        _reserved() if cuda else 0,
        cuda,
        len(_UUID),
    )


# ``torch.cuda`` once torch is imported (a module attribute lookup on torch is not free).
_TORCH_CUDA: list[Any] = []


def _cuda_initialized() -> bool:
    """``torch.cuda.is_initialized()``, read from its flag when torch has one (every call);
    False before torch is imported."""
    if not _TORCH_CUDA:
        torch = _MODS.get("torch")
        if torch is None:
            return False
        _TORCH_CUDA.append(torch.cuda)
    flag = getattr(_TORCH_CUDA[0], "_initialized", None)
    return bool(flag) if flag is not None else bool(_TORCH_CUDA[0].is_initialized())


def refresh() -> None:
    """Publishes a fresh report for the heartbeat (its resident set) while no call runs."""
    if _PUBLISH is not None and not link.in_call():
        publish()


def install(worker_link: Any) -> None:
    """Connects the registry to the control thread (called by the runtime once connected)."""
    global _PUBLISH
    _PUBLISH = worker_link.publish
    worker_link.set_model_handler(execute)
    publish()
    after_import("comfy.model_management", _on_comfy_imported)
    if settings.get().module_hooks:
        after_import("torch", lambda torch: module_hooks.install(torch, _observe))


def _observe(module: Any) -> None:
    """The pack moved ``module``: a model of its own now, or a known one that changed."""
    if owned.is_quiet():
        return
    with _LOCK:
        changed = owned.observe(module, _MODULES)
    if changed:
        publish()


def _on_comfy_imported(module: Any) -> None:
    """``comfy.model_management`` was just imported, maybe by a running node: its loads from
    now on are admitted, and, inside a call, marked in use."""
    global _CALL_USED
    _watch_loads()
    unload_all.install(_LOCK)
    interrupts.attach_comfy()
    if _CALL_USED is None and _PUBLISH is not None and link.in_call():
        _CALL_USED = set()

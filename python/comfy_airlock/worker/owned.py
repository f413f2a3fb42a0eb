"""Which worker model a ``torch.nn.Module`` belongs to, and the rule that makes a module a pack
puts on ComfyUI's device a worker model of its own.

Real packs hold their own networks and move them with ``.to()``/``.cuda()``; few call
``register_model``. The worker sees every top-level move of a module (``module_hooks.py``) and
asks :func:`observe`:

- a module inside one already known (the model itself or any submodule): the model is measured
  again, so a move by the pack in either direction reaches the host's ledger;
- a module inside a ComfyUI model (a ``ModelPatcher``'s ``.model``, indexed the first time a
  report lists the patcher), or of a class ComfyUI defines (a UNet getting its weights through
  ``load_state_dict`` before its patcher loads it): nothing, ComfyUI's own loader accounts for it;
- otherwise, a module with bytes now on ComfyUI's device becomes a worker model (``auto``),
  absorbing any known model inside it (a pack that moved ``net.encoder`` and then ``net``).

Moves made by ComfyUI's loader in this worker and by the host's commands happen under
:func:`quiet` and are not observed: they are ComfyUI's own, accounted for as patchers.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from comfy_airlock.worker import modules

# Every submodule of a known worker model -> that model's id; of a ComfyUI model -> 0.
_OWNER: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_PATCHERS: weakref.WeakSet[Any] = weakref.WeakSet()
_QUIET = threading.local()
# Classes of ComfyUI itself: its loader accounts for them, wrapped in patchers.
_COMFYUI_PACKAGES = ("comfy", "comfy_extras", "comfy_api")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Moves made in this block (ComfyUI's loader, the host's commands) are not the pack's."""
    depth = getattr(_QUIET, "depth", 0)
    _QUIET.depth = depth + 1
    try:
        yield
    finally:
        _QUIET.depth = depth


def is_quiet() -> bool:
    return getattr(_QUIET, "depth", 0) > 0


def device_of(module: Any) -> str | None:
    first = next(iter([*module.parameters(), *module.buffers()]), None)
    return str(first.device) if first is not None else None


def comfy_device() -> str | None:
    """ComfyUI's device in this worker: ``get_torch_device()`` once its model management is
    imported; the current CUDA device in a pack that runs torch without ComfyUI; else None."""
    mm = sys.modules.get("comfy.model_management")
    if mm is not None:
        dev = mm.get_torch_device()
        if getattr(dev, "type", None) == "cuda" and dev.index is None:
            return "cuda:0"
        return str(dev)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return f"cuda:{torch.cuda.current_device()}"
    return None


def _inside(root: Any) -> list[Any]:
    """``root`` and every module inside it; a registered model that is not a torch module (a
    pack's own arrays with a ``parameters()``) is only itself."""
    walk = getattr(root, "modules", None)
    return list(walk()) if callable(walk) else [root]


def adopt(known: dict[int, modules.Module], m: modules.Module) -> None:
    """``m`` is a worker model: every module inside it is its, and a model inside it joins it.
    Under the ledger lock."""
    root = m.ref()
    if root is None:
        return
    for sub in _inside(root):
        old = _OWNER.get(sub)
        if old and old != m.id and old in known:
            inner = known.pop(old)
            inner.forget()
        _OWNER[sub] = m.id
    known[m.id] = m


def release(m: modules.Module) -> None:
    root = m.ref()
    if root is None:
        return
    for sub in _inside(root):
        if _OWNER.get(sub) == m.id:
            del _OWNER[sub]


def claim_patcher(patcher: Any, known: dict[int, modules.Module]) -> None:
    """A ComfyUI model seen in this worker's ledger: its modules are ComfyUI's, and a module
    taken for a pack's before the patcher wrapped it is dropped (it would count twice)."""
    try:
        if patcher in _PATCHERS:
            return
        _PATCHERS.add(patcher)
    except TypeError:  # a patcher that cannot be weakly referenced or hashed: index it anew
        pass
    root = getattr(patcher, "model", None)
    if root is None:
        return
    for sub in _inside(root):
        try:
            old = _OWNER.get(sub)
            _OWNER[sub] = 0
        except TypeError:  # a model object that cannot be weakly referenced: nothing of it moves
            continue
        if old and old in known:
            known.pop(old).forget()


def observe(module: Any, known: dict[int, modules.Module]) -> bool:
    """The pack moved ``module`` (or loaded weights into it). True: the worker's report changed.
    Under the ledger lock."""
    owner = _OWNER.get(module)
    if owner == 0:
        return False  # ComfyUI's
    if owner is not None and owner in known:
        return known[owner].moved()
    if type(module).__module__.split(".", 1)[0] in _COMFYUI_PACKAGES:
        return False  # ComfyUI's own networks (a UNet getting its weights): its loader's
    dev = comfy_device()
    if dev is None:
        return False
    tensors = [*module.parameters(), *module.buffers()]
    if not any(str(t.device) == dev for t in tensors):
        return False
    if not any(modules.nbytes(t) for t in tensors):
        return False
    adopt(known, modules.Module(module, type(module).__name__, dev, auto=True))
    return True

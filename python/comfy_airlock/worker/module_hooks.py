"""Seeing a pack move its own modules, in this worker's torch only.

``torch.nn.Module._apply`` is what ``.to()``, ``.cuda()``, ``.cpu()``, ``.half()``,
``.float()`` and ``.to_empty()`` all run, recursing into submodules through ``_apply`` itself;
``load_state_dict`` copies weights into a module already placed. Both are wrapped once, when
the worker's torch is imported, and only the outermost call of a thread is reported
(``owned.observe``, under the ledger lock), after the original has run and whatever it raised.
A failure of ours is logged and never reaches the pack. The ``module_hooks`` setting off
leaves torch untouched (then only ``register_model`` makes a pack's module known).

This is the worker's own copy of torch, in its own process: the host's is never touched.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

log = logging.getLogger("comfy_airlock.worker")

_DEPTH = threading.local()
_MARK = "_airlock_observed"


def install(torch: ModuleType, notify: Callable[[Any], None]) -> None:
    """Wraps ``Module._apply`` and ``Module.load_state_dict`` to call ``notify(module)`` after
    each outermost call on a thread. Idempotent."""
    cls = torch.nn.Module
    for name in ("_apply", "load_state_dict"):
        original = getattr(cls, name)
        if getattr(original, _MARK, False):
            continue
        setattr(cls, name, _wrap(original, notify))


def _wrap(original: Callable[..., Any], notify: Callable[[Any], None]) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(_DEPTH, "n", 0)
        _DEPTH.n = depth + 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _DEPTH.n = depth
            if depth == 0:
                try:
                    notify(self)
                except Exception:
                    log.exception("comfy-airlock could not account for a move of %s", type(self))

    setattr(wrapper, _MARK, True)
    return wrapper

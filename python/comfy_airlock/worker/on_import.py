"""Runs hooks right after a module is imported in this worker.

A pack may import ``comfy.model_management`` for the first time inside a node. The worker puts
its wrappers on that module (admission around ``load_models_gpu``, the interrupt gate), and a
wrapper put on only at the start of each call would miss the whole call that imported it: a
node that did ``import comfy.model_management as mm`` in its function ran that first call with
the upstream lock, so ``POST /interrupt`` reached it only by SIGINT. A meta-path finder that
defers to the others and wraps the loader's ``exec_module`` is the import system's own
extension point; it touches only imports in this worker process, never the host's. It stays
on ``sys.meta_path``, so an ``importlib.reload`` (which makes the module's globals anew) runs
the hooks again.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

log = logging.getLogger("comfy_airlock.worker")

Hook = Callable[[ModuleType], None]


def _run(name: str, hooks: list[Hook], module: ModuleType) -> None:
    # Our bookkeeping must never fail the pack's import, nor one hook stop the others.
    for hook in list(hooks):
        try:
            hook(module)
        except Exception:
            log.exception("comfy-airlock's hook on the import of %s failed", name)


class _After(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.hooks: dict[str, list[Hook]] = {}
        self._busy: set[str] = set()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        hooks = self.hooks.get(fullname)
        if hooks is None or fullname in self._busy:
            return None
        self._busy.add(fullname)  # the other finders find the real spec
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._busy.discard(fullname)
        loader: Any = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        class _Loader(importlib.abc.Loader):
            def create_module(self, s: importlib.machinery.ModuleSpec) -> ModuleType | None:
                return loader.create_module(s)

            def exec_module(self, module: ModuleType) -> None:
                run(module)
                _run(fullname, hooks, module)

            def __getattr__(self, attr: str) -> Any:  # get_source, is_package, ... as before
                return getattr(loader, attr)

        spec.loader = _Loader()
        return spec


_FINDER = _After()


def after_import(name: str, hook: Hook) -> None:
    """Calls ``hook(module)`` once ``name`` is imported: at once if it already is, else right
    after its first import finishes; and again after each reload."""
    _FINDER.hooks.setdefault(name, []).append(hook)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    module = sys.modules.get(name)
    if module is not None:
        _run(name, [hook], module)

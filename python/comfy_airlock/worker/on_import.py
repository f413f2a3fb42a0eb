"""Runs a hook right after a module is first imported in this worker.

A pack may import ``comfy.model_management`` for the first time inside a node. The worker puts
its wrappers on that module (admission around ``load_models_gpu``, the interrupt gate) at the
start of each call, so without this the first node's loads would be neither admitted nor
marked in use. A meta-path finder that defers to the others and wraps the loader's
``exec_module`` is the import system's own extension point; it touches only imports in this
worker process, never the host's.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any


class _After(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, hook: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.hook = hook
        self._busy = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name or self._busy:
            return None
        self._busy = True  # the other finders find the real spec
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
            self._busy = False
        loader: Any = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module
        hook = self.hook

        class _Loader(importlib.abc.Loader):
            def create_module(self, s: importlib.machinery.ModuleSpec) -> ModuleType | None:
                return loader.create_module(s)

            def exec_module(self, module: ModuleType) -> None:
                run(module)
                hook(module)

        spec.loader = _Loader()
        return spec


def after_import(name: str, hook: Callable[[ModuleType], None]) -> None:
    """Calls ``hook(module)`` once ``name`` is imported: at once if it already is, else right
    after its first import finishes."""
    module = sys.modules.get(name)
    if module is not None:
        hook(module)
        return
    sys.meta_path.insert(0, _After(name, hook))

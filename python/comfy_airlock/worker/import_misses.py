"""The modules a pack's import looked for and found nowhere, noted on the error when the
import fails (ADR 0050).

A pack that imports a module it does not declare fails in its environment where it works in
ComfyUI's (ADR 0049). When the import's own error is ``No module named 'x'``, that names the
module; but packs often swallow it (``try: import matplotlib ... except ImportError:``, or a
whole group of nodes skipped on any ImportError) and fail later at something else: Comfyroll
then fails at ``NameError: name 'CR_HalftoneGrid' is not defined``. The import system is the
one witness: a finder placed last in ``sys.meta_path`` is asked only for a module every other
finder did not find. Looked-for names alone mean nothing (packs probe optional modules all the
time), so they are reported only with a failed import, and only those still not found then.

An import that succeeds can still have gone on without a module the pack's own code imported:
AlekPet's pack imports its translator nodes under ``except Exception`` and, natively, installs
their packages into ComfyUI's environment with pip at its first start; isolated, those nodes are
just not there. Those names (the ones a file of the pack itself asked for, not the optional
probes of the libraries it imports: transformers alone probes dozens) are kept for the scan
(:func:`went_without`), where ``airlock isolate`` names the ones ComfyUI's environment has
(ADR 0057).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Iterator
from typing import Any

from comfy_airlock import undeclared

_PYTHONS_OWN = frozenset(getattr(sys, "stdlib_module_names", ()))
# The import system's own files, between a file's import statement and a finder.
_IMPORT_MACHINERY = ("<frozen importlib", os.path.dirname(importlib.util.__file__) + os.sep)

# What successful imports of the pack's own files went on without, in order (:func:`went_without`).
_WENT_WITHOUT: list[str] = []


class _LastFinder(importlib.abc.MetaPathFinder):
    """Asked only when no finder before it found a module; finds nothing itself. Notes too
    which names a file under ``roots`` (the pack's folders) asked for."""

    def __init__(self, roots: tuple[str, ...]) -> None:
        self.names: list[str] = []
        self.by_pack: list[str] = []
        self._roots = tuple(os.path.join(os.path.realpath(r), "") for r in roots)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if path is not None or "." in fullname:
            return
        if fullname not in self.names:
            self.names.append(fullname)
        if self._roots and fullname not in self.by_pack and self._asked_by_pack():
            self.by_pack.append(fullname)

    def _asked_by_pack(self) -> bool:
        """Whether the file whose import statement (or ``find_spec`` call) reached this finder
        is one of the pack's: the first frame outside the import system."""
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename.startswith(_IMPORT_MACHINERY):
            frame = frame.f_back
        if frame is None:
            return False
        return os.path.realpath(frame.f_code.co_filename).startswith(self._roots)


@contextlib.contextmanager
def noted(*roots: str) -> Iterator[None]:
    """Runs a pack's import; an error it raises carries the note of
    :func:`comfy_airlock.undeclared.looked_for_note` when it looked for top-level modules
    that are still not found. When it succeeds, what files under ``roots`` looked for and
    is still not found is kept for :func:`went_without`."""
    finder = _LastFinder(roots)
    sys.meta_path.append(finder)
    try:
        yield
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        missing = [n for n in finder.names if _still_missing(n)]
        if missing:
            _add_note(e, undeclared.looked_for_note(missing))
        raise
    else:
        for n in finder.by_pack:
            if n not in _WENT_WITHOUT and _still_missing(n):
                _WENT_WITHOUT.append(n)
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(finder)


def went_without() -> list[str]:
    """The top-level modules the pack's own files looked for, while imports of it that
    succeeded ran, and that are still found nowhere (an ``except ImportError`` went on)."""
    return [n for n in _WENT_WITHOUT if _still_missing(n)]


def _still_missing(name: str) -> bool:
    if name in _PYTHONS_OWN or name in sys.modules:
        return False
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return False


def _add_note(e: BaseException, note: str) -> None:
    if hasattr(e, "add_note"):
        e.add_note(note)
        return
    # Before Python 3.11: kept where 3.11 keeps notes; the worker's traceback adds them.
    notes = getattr(e, "__notes__", None)
    with contextlib.suppress(AttributeError, TypeError):
        e.__notes__ = [*(notes or []), note]  # type: ignore[attr-defined]

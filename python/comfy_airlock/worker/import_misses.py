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
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Iterator
from typing import Any

from comfy_airlock import undeclared

_PYTHONS_OWN = frozenset(getattr(sys, "stdlib_module_names", ()))


class _LastFinder(importlib.abc.MetaPathFinder):
    """Asked only when no finder before it found a module; finds nothing itself."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if path is None and "." not in fullname and fullname not in self.names:
            self.names.append(fullname)


@contextlib.contextmanager
def noted() -> Iterator[None]:
    """Runs a pack's import; an error it raises carries the note of
    :func:`comfy_airlock.undeclared.looked_for_note` when it looked for top-level modules
    that are still not found."""
    finder = _LastFinder()
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
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(finder)


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

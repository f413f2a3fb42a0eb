"""Which pack is being imported now, read from ``sys.modules`` alone (ADR 0033).

``comfy_env.register_nodes()`` and ``comfy_airlock.register_nodes()`` take no path: the pack
that calls them is the pack being imported. comfy-env finds it by reading its caller's frame;
we read no frame (ADR 0030). ComfyUI's ``load_custom_node`` (and a worker, the same way) puts
a pack's module into ``sys.modules`` under its folder's name just before it runs the pack's
``__init__.py``, and imports packs one at a time, so the pack being imported is the newest
top-level package in ``sys.modules`` that has no ``NODE_CLASS_MAPPINGS`` yet and whose folder
holds the pack's config. Modules the pack itself imports while it runs come later in
``sys.modules`` but are either inside it (not top-level) or hold no pack config (numpy,
torch...), so they are passed over.

:func:`newest_importing` is the rule (no imports, no I/O: the caller gives the facts and the
test for a pack's folder); :func:`importing_pack` reads ``sys.modules`` and the disk for it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence


def newest_importing(
    modules: Sequence[tuple[str, str | None, bool]], is_pack: Callable[[str], bool]
) -> tuple[str, str] | None:
    """``(module name, folder)`` of the pack being imported, or None.

    ``modules``: ``(name, __file__, has NODE_CLASS_MAPPINGS)`` in ``sys.modules`` order (the
    order of insertion). A candidate is a package (its file an ``__init__.py``) whose parent
    package is not in ``modules``, without mappings yet, whose folder ``is_pack`` accepts; the
    newest candidate wins."""
    names = {name for name, _, _ in modules}
    for name, file, has_mappings in reversed(modules):
        if has_mappings or not file or os.path.basename(file) != "__init__.py":
            continue
        parent = name.rpartition(".")[0]
        if parent and parent in names:
            continue
        folder = os.path.dirname(os.path.abspath(file))
        if is_pack(folder):
            return name, folder
    return None


def importing_pack(is_pack: Callable[[str], bool]) -> tuple[str, str] | None:
    """:func:`newest_importing` over this process's ``sys.modules``."""
    facts = []
    for name, module in list(sys.modules.items()):
        # The namespace only: a lazy module's ``__getattr__`` must not run (it may import).
        ns = getattr(module, "__dict__", None) or {}
        file = ns.get("__file__")
        facts.append((name, file if isinstance(file, str) else None, "NODE_CLASS_MAPPINGS" in ns))
    return newest_importing(facts, is_pack)


def script_dir() -> str | None:
    """The folder of the script Python runs (``python install.py``, as ComfyUI-Manager runs a
    pack's ``install.py``), or None in an interactive or ``-c`` run."""
    file = getattr(sys.modules.get("__main__"), "__file__", None)
    return os.path.dirname(os.path.abspath(file)) if isinstance(file, str) else None

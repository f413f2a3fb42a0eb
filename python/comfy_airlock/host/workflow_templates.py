"""The example workflows of isolated packs, served where ComfyUI serves a native pack's.

Natively ``CustomNodeManager.add_routes`` (ComfyUI's ``app/custom_node_manager.py``), once every
custom node has imported, serves each loaded module's workflow folder (``example_workflows``,
``example``, ``examples``, ``workflow``, ``workflows``, each that exists, in that order) as
``web.static('/api/workflow_templates/<module>', folder)``: the frontend's template browser
opens a pack's example workflows from there. An isolated pack is not among ComfyUI's loaded
modules, so the same rule is applied here, to the packs whose scan succeeded (as natively only
packs whose import succeeded are served), through ``PromptServer.instance.routes`` as any pack
adds a route: a static entry gets no ``/api`` twin there, as upstream adds none.

Not covered: ComfyUI's own ``GET /workflow_templates`` (the index of every pack's workflow
names) globs the ``custom_nodes`` folders, so it does not name an isolated pack's workflows; it
is ComfyUI's answer, which we do not rewrite.
"""

from __future__ import annotations

import os
import threading

from comfy_airlock.host.server_bridge import serve_static, take_pending

PREFIX = "/api/workflow_templates/"
# Upstream's order; each folder that exists is served under the same prefix.
FOLDERS = ("example_workflows", "example", "examples", "workflow", "workflows")

_LOCK = threading.Lock()
_PENDING: list[tuple[str, str, str]] = []  # (pack, url, folder)
_SEEN: set[tuple[str, str]] = set()  # (url, folder) noted once: a reload adds no route


def folders(pack_dir: str) -> list[tuple[str, str]]:
    """``(url, folder)`` for each workflow folder ComfyUI would serve for the pack."""
    name = os.path.basename(os.path.normpath(pack_dir))
    found = (os.path.join(pack_dir, f) for f in FOLDERS)
    return [(PREFIX + name, path) for path in found if os.path.exists(path)]


def remember(pack: str, pack_dir: str) -> None:
    """Notes a loaded pack's workflow folders; :func:`mount_pending` serves them (a route once
    added stays: routes are fixed once ComfyUI's server runs)."""
    with _LOCK:
        for url, path in folders(pack_dir):
            if (url, path) not in _SEEN:
                _SEEN.add((url, path))
                _PENDING.append((pack, url, path))


def mount_pending() -> None:
    """Serves the workflow folders noted since the last call, as ``add_routes`` would (our
    custom node is imported before ComfyUI runs it)."""
    with _LOCK:
        todo = take_pending(_PENDING)
    for pack, url, path in todo:
        serve_static(pack, url, path, "example workflows")

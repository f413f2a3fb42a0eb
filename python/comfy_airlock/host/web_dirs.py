"""The frontend files of isolated packs, served as ComfyUI serves a native pack's (ADR 0021).

Natively, ``load_custom_node`` records a pack's web folders in ``nodes.EXTENSION_WEB_DIRS``
once its module imported: ``[tool.comfy] web`` of its ``pyproject.toml`` under the project's
name, then ``WEB_DIRECTORY`` under the module's (folder's) name. ``PromptServer.add_routes``
then serves each as ``web.static('/extensions/<name>', dir)``, and ``GET /extensions`` lists
every ``.js`` file in them, which the frontend imports before it registers the node types.

That list is a host list we do not write. Instead the same two rules are applied here, to the
``WEB_DIRECTORY`` the pack's scan read in its worker and to its ``pyproject.toml`` (read with
ComfyUI's own parser, in the host: it is a file, not the pack's code):

- each folder is served under the URL a native pack gets, by a ``web.static`` entry in
  ``PromptServer.instance.routes``, as a pack adds routes. upstream's ``add_routes`` gives
  static entries no ``/api`` twin, as it gives a native pack's folder none, and serves them
  from the host's own file handler: the same headers, ranges and 404s, and no worker starts;
- ``GET /airlock/extensions`` lists their ``.js`` files as ``GET /extensions`` would, and our
  frontend module ``isolated_extensions.js`` imports each one with the frontend's own rule,
  while the frontend is loading extensions: they register in the same phase as native ones.
"""

from __future__ import annotations

import glob
import logging
import os
import sys
import threading
import urllib.parse
from dataclasses import dataclass

from comfy_airlock.host.server_bridge import serve_static, take_pending

log = logging.getLogger("comfy_airlock")

PREFIX = "/extensions/"


@dataclass(frozen=True)
class WebDir:
    pack: str
    name: str  # the URL segment after /extensions/
    path: str


_LOCK = threading.Lock()
_DIRS: dict[str, WebDir] = {}
_PENDING: list[WebDir] = []
_MOUNTED: set[str] = set()
_WARNED: set[str] = set()


def folders(
    pack: str,
    pack_dir: str,
    web_directory: str | None,
    injected: dict[str, str] | None = None,
    members: dict[str, str | None] | None = None,
) -> list[WebDir]:
    """The web folders ComfyUI would register for the pack in ``pack_dir``, in its order: the
    ones the pack's import put into ``nodes.EXTENSION_WEB_DIRS`` itself (``injected``), then
    the ``pyproject.toml`` one, then ``WEB_DIRECTORY`` (a later one of the same name replaces
    an earlier). An injected folder outside the pack's own is not served: the host would be
    serving, at a worker's word, files the worker may not even read (its sandbox). For a group
    (ADR 0054), ``members`` maps each of its packs to its ``WEB_DIRECTORY``: the two rules
    apply to each member's folder, as to a pack in ``custom_nodes/``."""
    found: dict[str, WebDir] = {}
    # A group's member may be a link to a pack kept elsewhere: its own folder counts as inside.
    insides = [
        os.path.realpath(p) for p in [pack_dir, *(os.path.join(pack_dir, m) for m in members or ())]
    ]
    for name, path in (injected or {}).items():
        real = os.path.realpath(path)
        if not any(os.path.commonpath([inside, real]) == inside for inside in insides):
            log.warning(
                "[comfy-airlock] pack %r: nodes.EXTENSION_WEB_DIRS[%r] is %s, outside the "
                "pack's folder: not served",
                pack,
                name,
                path,
            )
        elif os.path.isdir(real):
            found[name] = WebDir(pack, name, real)
    sources = (
        [(os.path.join(pack_dir, m), wd) for m, wd in members.items()]
        if members
        else [(pack_dir, web_directory)]
    )
    for folder, wd in sources:
        project = _pyproject_web(folder)
        if project is not None:
            name, path = project
            found[name] = WebDir(pack, name, path)
        if wd is not None:
            path = os.path.abspath(os.path.join(folder, wd))
            if os.path.isdir(path):
                name = os.path.basename(os.path.normpath(folder))
                found[name] = WebDir(pack, name, path)
    return list(found.values())


def _pyproject_web(pack_dir: str) -> tuple[str, str] | None:
    """``(project name, folder)`` from ``[tool.comfy] web``, read as ``load_custom_node`` reads
    it; None when there is none (or ComfyUI's parser is not importable here)."""
    if not os.path.isfile(os.path.join(pack_dir, "pyproject.toml")):
        return None
    try:
        from comfy_config import config_parser

        config = config_parser.extract_node_configuration(pack_dir)
        web = config.tool_comfy.web if config is not None else None
        if not web:
            return None
        path = os.path.join(pack_dir, web)
        return (config.project.name, path) if os.path.isdir(path) else None
    except Exception as e:  # upstream only warns, and loads the pack
        log.warning(
            "[comfy-airlock] %s/pyproject.toml: its web folder is not read: %s", pack_dir, e
        )
        return None


def remember(
    pack: str,
    pack_dir: str,
    web_directory: str | None,
    injected: dict[str, str] | None = None,
    members: dict[str, str | None] | None = None,
) -> None:
    """Notes a loaded pack's web folders (:func:`folders`); :func:`mount_pending` serves them.
    A reloaded pack's folders replace its old ones in the listing (a route already added
    stays: routes are fixed once ComfyUI's server runs)."""
    dirs = folders(pack, pack_dir, web_directory, injected, members)
    with _LOCK:
        for name in [n for n, d in _DIRS.items() if d.pack == pack]:
            del _DIRS[name]
        for d in dirs:
            other = _DIRS.get(d.name)
            if other is not None and other.pack != pack:
                log.error(
                    "[comfy-airlock] pack %r: its web folder /extensions/%s is pack %r's too; "
                    "the first one is served",
                    pack,
                    d.name,
                    other.pack,
                )
                continue
            _DIRS[d.name] = d
            if d.name not in _MOUNTED:
                _PENDING.append(d)


def mount_pending() -> None:
    """Adds a static route for each folder noted since the last call (before ComfyUI's
    ``add_routes``: our custom node is imported before it runs)."""
    with _LOCK:
        todo = take_pending(_PENDING)
        _MOUNTED.update(d.name for d in todo)
    for d in todo:
        # As upstream's add_routes does for EXTENSION_WEB_DIRS, through the route table.
        serve_static(d.pack, PREFIX + d.name, d.path, "web folder")


def listing() -> list[str]:
    """Every ``.js`` file of the served folders, as upstream's ``GET /extensions`` names them.
    A name ComfyUI serves itself (a pack in ``custom_nodes/`` that registered through
    ``register_nodes``, which ComfyUI imported) is ComfyUI's to list."""
    native = getattr(sys.modules.get("nodes"), "EXTENSION_WEB_DIRS", None) or {}
    with _LOCK:
        dirs = [d for d in _DIRS.values() if d.name not in native]
        clashes = [d for d in _DIRS.values() if d.name in native and d.name not in _WARNED]
        _WARNED.update(d.name for d in clashes)
    for d in clashes:
        if os.path.realpath(native[d.name]) != os.path.realpath(d.path):
            log.error(
                "[comfy-airlock] pack %r: /extensions/%s is also a pack of custom_nodes/ "
                "(%s); the isolated pack's files are served there, ComfyUI's list names the "
                "other's: give one of the two folders another name",
                d.pack,
                d.name,
                native[d.name],
            )
    out: list[str] = []
    for d in dirs:
        files = glob.glob(os.path.join(glob.escape(d.path), "**/*.js"), recursive=True)
        quoted = urllib.parse.quote(d.name)
        out.extend(
            f"{PREFIX}{quoted}/" + os.path.relpath(f, d.path).replace("\\", "/") for f in files
        )
    return out

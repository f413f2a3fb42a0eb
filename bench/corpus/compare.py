"""Pure comparisons of what one pack did on the native and the isolated server (no I/O)."""

from __future__ import annotations

import json
import re
from typing import Any


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def route_key(route: dict[str, str]) -> str:
    return f"{route['method']} {route['path']}"


def pack_routes(routes: list[dict[str, str]], baseline: set[str]) -> list[str]:
    """The routes of a server that its baseline (ComfyUI with no pack) does not have; the
    ``/api`` twin that ComfyUI adds for each route is folded into it."""
    keys = {route_key(r) for r in routes} - baseline
    out = set()
    for key in keys:
        method, path = key.split(" ", 1)
        if path.startswith("/api/") and f"{method} {path[4:]}" in keys:
            continue
        # comfy-airlock serves an isolated pack's static directory as a catch-all route under
        # its prefix; natively it is a static resource at the prefix: the same route.
        out.add(key.removesuffix("/{tail}"))
    return sorted(out)


def static_dirs(routes: list[dict[str, str]], pack_routes_: list[str]) -> dict[str, str]:
    """Prefix -> directory of the pack's static GET routes (native side)."""
    return {
        r["path"]: r["directory"]
        for r in routes
        if r.get("directory") and f"GET {r['path']}" in pack_routes_ and r["method"] == "GET"
    }


# Path words of GET routes that act rather than answer (Easy-Use's GET /easyuse/reboot
# execs ComfyUI anew): never asked.
ACTS = (
    "reboot",
    "restart",
    "shutdown",
    "exit",
    "quit",
    "kill",
    "delete",
    "remove",
    "clear",
    "reset",
    "install",
    "update",
    "upgrade",
    "download",
    "clean",
    "purge",
    "interrupt",
    "cancel",
    "free",
    "wipe",
    "stop",
    "save",
    "switch",
    "toggle",
    "write",
    "upload",
    "rename",
    "move",
    "set",
    "refresh",
    "run",
    "execute",
    "queue",
)


def gettable(route: str) -> bool:
    """A GET route the runner asks without knowing the pack: no match info in its path, and
    no word in it that says the route acts (:data:`ACTS`)."""
    method, path = route.split(" ", 1)
    words = {w for w in re.split(r"[^a-z]+", path.lower()) if w}
    return method == "GET" and "{" not in path and not words & set(ACTS)


def answer_differs(native: dict[str, Any], isolated: dict[str, Any]) -> str | None:
    """Why two answers to one request differ (status, content type, body), or None."""
    for key in ("status", "content_type", "body_sha256"):
        if native.get(key) != isolated.get(key):
            return f"{key}: native {native.get(key)!r}, isolated {isolated.get(key)!r}"
    return None


def verdict(run: dict[str, Any], bases: tuple[str, ...] = ()) -> str:
    """A recorded node run's verdict, recomputed from its raw results (so that a change of
    these rules needs no new run); a native rerun that differed stays the verdict. ``bases``:
    the two servers' base directories, as the result records them."""
    if run.get("verdict") in ("nondeterministic natively", "not runnable"):
        return run["verdict"]
    return run_class(run.get("native") or {}, run.get("isolated"), bases)


def run_class(
    native: dict[str, Any], isolated: dict[str, Any] | None, bases: tuple[str, ...] = ()
) -> str:
    """One node's verdict: ``identical``, ``differs``, ``isolated failed``, ``same error``,
    ``not run natively`` (native failed or timed out: a missing model file, say), or ``not
    runnable`` (the generator cannot make its inputs). An error that names a path in its
    server's base directory (``bases``: native, isolated) names it in the other's alike."""
    if native.get("status") == "not runnable":
        return "not runnable"
    if native.get("status") != "success":
        if isolated is not None and _error_head(native) == _error_head(isolated, bases):
            return "same error"
        return "not run natively"
    if isolated is None or isolated.get("status") != "success":
        return "isolated failed"
    out = canonical(native.get("outputs"))
    same = out == canonical(isolated.get("outputs"))
    same = same and native.get("files") == isolated.get("files")
    if not same:
        return "differs"
    # An object ComfyUI cannot look into (a pack's own, a model) is compared by its class and
    # repr only (ADR 0023): a weaker "identical", counted apart.
    return "identical by class and repr" if '\\"object\\":' in out else "identical"


def _error_head(run: dict[str, Any], bases: tuple[str, ...] = ()) -> str | None:
    """The exception type and the first line of its message (the isolated side appends the
    worker's traceback to the message); ``bases``: the isolated server's base directory in it
    read as the native one's."""
    if run.get("status") != "error":
        return run.get("status")
    text = run.get("error") or ""
    # Where the host appended the worker's traceback (escaped too: a KeyError's str is a repr).
    for mark in ("\n\n[comfy-airlock]", "\\n\\n[comfy-airlock]"):
        text = text.split(mark)[0]
    # A type the host has not imported comes as RemoteError, its real name first in the text.
    text = text.strip().removeprefix("comfy_airlock.RemoteError: ")
    head = text.splitlines()[0].rstrip("'\"") if text else ""
    if len(bases) == 2:
        head = head.replace(bases[1], bases[0])
    return head


def same_but_base(diff: str, bases: tuple[str, str]) -> bool:
    """An ``object_info_diff`` line whose two sides are equal once each server's own base
    directory is read as the other's (a default output path a pack computes from
    ``folder_paths``: the two servers run in two base directories; a user's ComfyUI has one)."""
    native_base, isolated_base = bases
    if ": native " not in diff or ", isolated " not in diff:
        return False
    _, rest = diff.split(": native ", 1)
    native, isolated = rest.rsplit(", isolated ", 1)
    return native.replace(native_base, isolated_base) == isolated

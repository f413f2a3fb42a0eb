"""A proxy's ``INPUT_TYPES`` (and a V3 proxy's ``/object_info`` entry) as the pack's code
gives them now, not only as the scan found them (ADR 0022).

Natively ``INPUT_TYPES`` is code, run each time ComfyUI serves ``/object_info`` and validates
or runs a node: a model dropdown (``folder_paths.get_filename_list``) shows a file added after
ComfyUI started. A proxy asks its worker instead, for all the pack's nodes at once (ComfyUI
asks node after node), and keeps the answer ``TTL_S`` seconds. It never waits long on a
worker: not for one that is busy (its call lane is taken; the last answer stands), nor more
than ``WAIT_S`` for an answer (ComfyUI's event loop waits with it), and it starts no worker:
when none runs, the last answer, else the scan's, stands. A pack that wants its lists live
from the start has its worker started with ComfyUI (``prestart = true``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from comfy_airlock import type_shapes
from comfy_airlock.host.pack import IsolatedPack

log = logging.getLogger("comfy_airlock")

TARGET = "comfy_airlock.worker.live_inputs:describe_inputs"
# How long one answer serves every node of the pack.
TTL_S = 2.0
# How long a caller (ComfyUI's event loop, its execution thread) waits for an answer.
WAIT_S = 2.0


@dataclass
class _Live:
    at: float = -math.inf
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pending: Future | None = None
    pending_since: float = 0.0


_LOCK = threading.Lock()
_LIVE: dict[str, _Live] = {}


def input_types(pack: IsolatedPack, node_id: str, scanned: dict[str, Any]) -> dict[str, Any]:
    meta = _current(pack, node_id)
    return meta["INPUT_TYPES"] if meta and "INPUT_TYPES" in meta else scanned


def info(pack: IsolatedPack, node_id: str, scanned: dict[str, Any]) -> dict[str, Any]:
    meta = _current(pack, node_id)
    return meta["info"] if meta and "info" in meta else scanned


def _current(pack: IsolatedPack, node_id: str) -> dict[str, Any] | None:
    waiting = _refresh(pack)
    if waiting is not None:
        future, left = waiting
        with contextlib.suppress(Exception):  # late, or failed: the last answer stands
            future.result(timeout=left)
    with _LOCK:
        live = _LIVE.get(pack.name)
        return live.nodes.get(node_id) if live is not None else None


def _refresh(pack: IsolatedPack) -> tuple[Future, float] | None:
    """The answer to wait for (and for how long), asked for if one is due; None: what is
    known stands."""
    now = time.monotonic()
    with _LOCK:
        live = _LIVE.setdefault(pack.name, _Live())
        if live.pending is None:
            if now - live.at < TTL_S or pack.busy or not pack.alive():
                return None
            live.pending = Future()
            live.pending_since = now
            # A daemon thread: ComfyUI's exit never waits for an answer (a pool's would).
            threading.Thread(
                target=_ask, args=(pack, live), name="airlock-inputs", daemon=True
            ).start()
        left = WAIT_S - (now - live.pending_since)
        return (live.pending, left) if left > 0 else None


def _ask(pack: IsolatedPack, live: _Live) -> None:
    nodes = None
    try:
        nodes = pack.ask(TARGET)
    except Exception as e:
        log.debug("[comfy-airlock] pack %r: node inputs not read again: %s", pack.name, e)
    with _LOCK:
        if nodes:
            # The worker's answer carries a pack's "any" types as markers, as its scan does.
            live.nodes.update(type_shapes.from_marker(nodes))
        live.at = time.monotonic()
        done, live.pending = live.pending, None
    if done is not None:
        done.set_result(None)

"""What a worker's memory code sends the host during a call, typed, and where each goes.

| topic | request | answer | handled by |
|---|---|---|---|
| ``admit?`` | :class:`~shapes.AdmitRequest` (before a load) | :class:`~shapes.Admission` | ``admission.answer`` |
| ``oom?`` | :class:`~shapes.AdmitRequest` (the load ran out of memory) | :class:`~shapes.Admission` | ``admission.answer`` |
| ``loaded`` | :class:`~shapes.Loaded` (the admitted load is done) | none | ``admission.release`` |
| ``telemetry`` | :class:`~shapes.WorkerReport` (what the call left it holding) | none | ``heartbeat.reconciled`` |
| ``unload_all?`` | none (a node called ``unload_all_models()`` in its worker) | none | ComfyUI's ``unload_all_models()`` |

A topic ending in ``?`` is a question: the worker's call waits for the answer, which the host
gives on the thread that waits for that call (ComfyUI's execution thread for a node). The
others are events: the worker goes on at once. All arrive on that same thread, in order, before
the call's reply. The handlers are looked up at each event, so a test may wrap one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, cast

from comfy_airlock.host.memory import admission, heartbeat
from comfy_airlock.host.memory.shapes import (
    Admission,
    AdmitRequest,
    Loaded,
    WorkerHandle,
    WorkerReport,
)


def admit(handle: WorkerHandle, topic: str, payload: Any) -> Admission:
    return admission.answer(handle, topic, cast(AdmitRequest, payload))


def loaded(handle: WorkerHandle, topic: str, payload: Any) -> None:
    holds = cast(Loaded, payload or {}).get("holds") or []
    admission.release(handle, [int(h) for h in holds])


def telemetry(handle: WorkerHandle, topic: str, payload: Any) -> None:
    generation = handle.generation()
    if generation is not None:
        heartbeat.reconciled(handle, generation, cast(WorkerReport, payload))


#: The memory topics and their handlers: ``handler(handle, topic, payload) -> answer``.
def unload_all(handle: WorkerHandle, topic: str, payload: Any) -> None:
    """A node called ``unload_all_models()`` in its worker, which freed the worker's own models:
    ComfyUI's runs here too, on the node's thread, as the pack's call would natively (its
    checkpoint, and every worker's models through their stand-ins; ADR 0052)."""
    mm = sys.modules.get("comfy.model_management")
    unload = getattr(mm, "unload_all_models", None)
    if unload is not None:
        unload()


TOPICS: dict[str, Callable[[WorkerHandle, str, Any], Any]] = {
    "admit?": admit,
    "oom?": admit,
    "loaded": loaded,
    "telemetry": telemetry,
    "unload_all?": unload_all,
}

"""A worker's loads are admitted by the host before they happen.

The worker's own ``load_models_gpu`` (our copy of ComfyUI, never the host's) frees room only
among the worker's own models, and on a blind platform (WDDM) it cannot even see what the host
and the other workers hold. So before it runs, the host is asked (``admit?``, a question on the
call lane answered by the thread that waits for this call) with upstream's own formula for what
the load needs: ``1.1 * weights + max(minimum_inference_memory(), memory_required +
extra_reserved_memory())`` per device. The host frees that much across all processes (the
arbiter over worker models, then upstream's ``free_memory`` over its own) and answers. The load
then runs with the worker's reserve corrected by the change of variables for its own view (the
blind term, ``seen_free - true_free`` of ``comfy_airlock.card``: zero where the view is
device-wide; the host publishes the same term for its own view). A load that still runs out of
memory tells the host, which frees room again, and is retried once.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

from comfy_airlock.card import card
from comfy_airlock.worker import link

log = logging.getLogger("comfy_airlock.worker")

# When each model (by id) was last asked for by this worker's load_models_gpu (wall clock, as
# the other workers' reports): the host's least-recently-used order across workers.
LAST_USED: dict[int, float] = {}


def needs(
    mm: Any, models: list[Any], memory_required: float = 0, minimum_memory_required: Any = None
) -> dict[Any, tuple[float, float]]:
    """``{device: (need, minimum)}`` for the non-CPU devices of ``models``, as upstream's
    ``load_models_gpu`` computes them (ComfyUI 0.30.0)."""
    inference = mm.minimum_inference_memory()
    extra = max(inference, memory_required + mm.extra_reserved_memory())
    if minimum_memory_required is None:
        minimum = extra
    else:
        minimum = max(inference, minimum_memory_required + mm.extra_reserved_memory())
    unique: dict[Any, None] = {}
    for m in models:
        unique[m] = None
        for sub in m.model_patches_models():
            unique[sub] = None
    total: dict[Any, float] = {}
    for x in unique:
        lm = mm.LoadedModel(x)
        total[lm.device] = total.get(lm.device, 0) + lm.model_memory_required(lm.device)
    return {
        dev: (t * 1.1 + extra, minimum)
        for dev, t in total.items()
        if getattr(dev, "type", "cpu") not in ("cpu", "mps")
    }


def module_need(missing: int) -> tuple[float, float]:
    """``(need, minimum)`` for putting back ``missing`` bytes of a pack's own module: what
    upstream's ``load_models_gpu`` asks for a model of that size (``1.1 * bytes +
    minimum_inference_memory()``, which holds ``--reserve-vram``), so that the user's reserve
    and room to run stay free as for ComfyUI's own models; just the bytes in a worker that has
    not imported ComfyUI (nothing there knows a reserve)."""
    mm = sys.modules.get("comfy.model_management")
    if mm is None:
        return missing, missing
    extra = max(mm.minimum_inference_memory(), mm.extra_reserved_memory())
    return missing * 1.1 + extra, extra


@contextlib.contextmanager
def corrected_reserve(mm: Any, devices: list[Any]) -> Iterator[None]:
    """The worker's ``EXTRA_RESERVED_VRAM`` raised by its view's blind term during the load, so
    its upstream targets true free memory (never clamped: a view above the truth adds, one below
    subtracts)."""
    base = mm.EXTRA_RESERVED_VRAM
    term = max((card(d).blind_term() for d in devices), default=0)
    mm.EXTRA_RESERVED_VRAM = base + term
    try:
        yield
    finally:
        mm.EXTRA_RESERVED_VRAM = base


def ask(topic: str, device: Any, need: float, minimum: float, ids: list[int]) -> dict[str, Any]:
    payload = {
        "device": str(device),
        "need": int(need),
        "minimum": int(minimum),
        "models": ids,
    }
    try:
        answer = link.ask(topic, payload)
    except Exception as e:  # outside a call, or a host without a bridge: load as upstream would
        log.debug("no admission from the host (%s): loading on this worker's own view", e)
        answer = {"granted": None, "error": str(e)}
    return answer if isinstance(answer, dict) else {"granted": None}


def admitted_load(original: Any, id_for: Any, ledger_lock: Any) -> Any:
    """Wraps the worker's ``load_models_gpu``: admission first, then the load with the
    corrected reserve, and one retry after an OOM the host has made room for.

    The load itself runs under ``ledger_lock``, the lock the host's model commands take on the
    control thread: upstream's ``load_models_gpu`` walks and pops ``current_loaded_models`` by
    index, so an eviction of another of this worker's models landing in the middle of it (the
    host may evict a busy worker's models its node does not use) must wait for it. The
    questions to the host are asked outside it: the host's answer may evict this worker's own
    models."""

    def load_models_gpu(
        models,
        memory_required=0,
        force_patch_weights=False,
        minimum_memory_required=None,
        force_full_load=False,
    ):
        mm = sys.modules["comfy.model_management"]
        wanted = needs(mm, list(models), memory_required, minimum_memory_required)
        ids = [id_for(m) for m in models]
        now = time.time()
        for i in ids:
            LAST_USED[i] = now
        answers = [ask("admit?", d, need, minimum, ids) for d, (need, minimum) in wanted.items()]

        def load():
            with ledger_lock, corrected_reserve(mm, list(wanted)):
                return original(
                    models,
                    memory_required=memory_required,
                    force_patch_weights=force_patch_weights,
                    minimum_memory_required=minimum_memory_required,
                    force_full_load=force_full_load,
                )

        try:
            try:
                return load()
            except Exception as e:
                if not _is_oom(e) or not wanted:
                    raise
                log.warning("out of memory loading %d model(s); asking the host for room", len(ids))
                loaded(answers)  # the failed attempt's bytes will never be on the card
                answers.clear()
                for device, (need, minimum) in wanted.items():
                    answers.append(ask("oom?", device, need, minimum, ids))
                return load()
        finally:
            loaded(answers)

    return load_models_gpu


def loaded(answers: list[dict[str, Any]]) -> None:
    """The load the host admitted is done (or failed): its bytes are on the card now (or never
    will be), so the host gives back the admission's hold at once (host/memory/admission.py), not at
    the end of the node."""
    holds = [a["hold"] for a in answers if isinstance(a, dict) and a.get("hold") is not None]
    if not holds:
        return
    try:
        link.emit("loaded", {"holds": holds})
    except Exception as e:  # outside a call: the host releases at the end of the call anyway
        log.debug("could not tell the host the load is done: %s", e)


def _is_oom(e: BaseException) -> bool:
    torch = sys.modules.get("torch")
    oom = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    if oom is not None and isinstance(e, oom):
        return True
    return "out of memory" in str(e).lower() and type(e).__name__ in ("RuntimeError",)

"""Workers started before their first node needs them.

A worker's cold start (its interpreter, ComfyUI's modules, the pack's import) is seconds; paid
when the first node of a pack runs, it stalls the prompt there. Two ways to pay it earlier:

- a queued prompt: ComfyUI calls every ``PromptServer.add_on_prompt_handler`` handler with the
  JSON of ``POST /prompt`` before it validates and queues it (the hook packs use to see
  prompts); :func:`on_prompt` starts, all in parallel, the workers of the isolated packs whose
  nodes the prompt names, so they start while ComfyUI validates the prompt and runs the nodes
  before theirs. It runs on ComfyUI's event loop, so it only claims each start and hands it to
  a thread (``IsolatedPack.start_ahead``); ``settings.start_on_queue`` off turns it off;
- ``prestart = true`` in a pack's ``airlock.toml``: its worker starts with ComfyUI, in the
  background, once the pack is loaded.

A node that runs while its worker is still starting waits for that start, as it would for its
own. A prompt whose isolated nodes are all cached starts their workers anyway: they are
then warm for the next prompt.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from comfy_airlock import settings
from comfy_airlock.host.pack import IsolatedPack
from comfy_airlock.host.server_bridge import prompt_server

log = logging.getLogger("comfy_airlock")

_LOCK = threading.Lock()
_BY_NODE: dict[str, IsolatedPack] = {}
_HANDLER_ADDED = False


def remember(pack: IsolatedPack, node_ids: Iterable[str]) -> None:
    """Notes which pack runs these node types (a reloaded pack replaces its old self)."""
    with _LOCK:
        for node_id in node_ids:
            _BY_NODE[node_id] = pack


def packs_of(prompt: Any) -> list[IsolatedPack]:
    """The isolated packs whose nodes ``prompt`` (API format: ``{id: {"class_type"...}}``)
    names, once each, in prompt order."""
    if not isinstance(prompt, dict):
        return []
    found: dict[str, IsolatedPack] = {}
    with _LOCK:
        for node in prompt.values():
            class_type = node.get("class_type") if isinstance(node, dict) else None
            pack = _BY_NODE.get(class_type) if isinstance(class_type, str) else None
            if pack is not None:
                found.setdefault(pack.name, pack)
    return list(found.values())


def on_prompt(json_data: Any) -> Any:
    """ComfyUI's on-prompt hook: starts the workers the prompt will need; returns the JSON
    as it came (a handler's return value replaces it)."""
    try:
        prompt = json_data.get("prompt") if isinstance(json_data, dict) else None
        started = [p.name for p in packs_of(prompt) if p.start_ahead()]
        if started:
            log.info("[comfy-airlock] a queued prompt starts the worker(s) of %s", started)
    except Exception as e:  # never in the way of the prompt
        log.warning("[comfy-airlock] workers not started ahead of a prompt: %s", e)
    return json_data


def add_handler() -> None:
    """Adds :func:`on_prompt` to ComfyUI's on-prompt handlers, once."""
    global _HANDLER_ADDED
    server = prompt_server()
    if _HANDLER_ADDED or server is None or not settings.get().start_on_queue:
        return
    add = getattr(server, "add_on_prompt_handler", None)
    if add is None:
        log.warning("[comfy-airlock] this ComfyUI has no on-prompt hook: workers start on use")
        return
    add(on_prompt)
    _HANDLER_ADDED = True


def start_with_comfyui(packs: Iterable[IsolatedPack]) -> None:
    """Starts the workers of the packs that ask for it (``prestart = true``)."""
    started = [p.name for p in packs if p.prestart and p.start_ahead()]
    if started:
        log.info("[comfy-airlock] worker(s) of %s start with ComfyUI (prestart)", started)

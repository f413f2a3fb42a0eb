"""A pack's on-prompt handlers (``PromptServer.instance.add_on_prompt_handler``), which
upstream runs on every ``POST /prompt`` body before validating it: packs rewrite seeds
("randomize" done by the server), fill wildcards, switch branches there. For an isolated pack
they run in its worker: the host registers one handler per pack with upstream's server (as any
custom node does) that sends the body to the worker and takes back what the pack's handlers
made of it.

Only for a prompt that holds a node of the pack: the pack's handlers act on its own nodes, and
a prompt without one does not start its worker. ComfyUI's API keys in ``extra_data``
(``execution.SENSITIVE_EXTRA_DATA_KEYS``) never cross; they are put back in the answer. Upstream
calls handlers on its event loop, so a worker that is not running yet is started there (once);
a handler that raises, or a worker that fails, is logged and the body goes on unchanged, as
upstream does for a handler that raises.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

log = logging.getLogger("comfy_airlock")

# Upstream's list (execution.SENSITIVE_EXTRA_DATA_KEYS), used when the host's is not there.
SENSITIVE = ("auth_token_comfy_org", "api_key_comfy_org")

_LOCK = threading.Lock()
_PACKS: dict[str, tuple[Any, frozenset[str]]] = {}


def install(pack: Any, node_ids: set[str], handlers: int) -> None:
    """Forwards prompts holding one of ``node_ids`` to ``pack``'s worker, if the pack
    registered ``handlers`` (its scan counted them). Registered with upstream's server once per
    pack name; a reloaded pack replaces the one its handler forwards to."""
    with _LOCK:
        known = pack.name in _PACKS
        if handlers <= 0:
            _PACKS.pop(pack.name, None)
            return
        _PACKS[pack.name] = (pack, frozenset(node_ids))
    server = getattr(getattr(sys.modules.get("server"), "PromptServer", None), "instance", None)
    if not known and server is not None:
        server.add_on_prompt_handler(lambda json_data: forward(pack.name, json_data))


def _holds(json_data: Any, node_ids: frozenset[str]) -> bool:
    prompt = json_data.get("prompt") if isinstance(json_data, dict) else None
    if not isinstance(prompt, dict):
        return False
    return any(isinstance(n, dict) and n.get("class_type") in node_ids for n in prompt.values())


def _sensitive_keys() -> tuple[str, ...]:
    execution = sys.modules.get("execution")
    return tuple(getattr(execution, "SENSITIVE_EXTRA_DATA_KEYS", SENSITIVE))


def forward(name: str, json_data: Any) -> Any:
    with _LOCK:
        entry = _PACKS.get(name)
    if entry is None or not _holds(json_data, entry[1]):
        return json_data
    pack = entry[0]
    extra = json_data.get("extra_data")
    kept = {}
    if isinstance(extra, dict):
        kept = {k: extra[k] for k in _sensitive_keys() if k in extra}
        json_data = {**json_data, "extra_data": {k: v for k, v in extra.items() if k not in kept}}
    try:
        out = pack.call("comfy_airlock.worker.comfy:on_prompt", json_data)
    except Exception as e:
        log.warning("[comfy-airlock] pack %r: its on_prompt handlers failed: %s", name, e)
        out = json_data
    if not isinstance(out, dict):
        log.warning(
            "[comfy-airlock] pack %r: its on_prompt handlers returned a %s, not the prompt "
            "body: ignored",
            name,
            type(out).__name__,
        )
        out = json_data
    if kept:
        out = {**out, "extra_data": {**(out.get("extra_data") or {}), **kept}}
    return out

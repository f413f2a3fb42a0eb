"""A node method run in the worker with what ComfyUI gives it about its prompt (ADR 0022).

Natively a node runs inside ComfyUI's ``CurrentNodeContext(prompt_id, node_id, list_index)``
(``comfy_execution.utils.get_executing_context()`` reads it), with ``GraphBuilder``'s id
prefix set for its call, and a ``DYNPROMPT`` hidden input is ComfyUI's live
``DynamicPrompt``. The host sends these as plain values
(host/prompt_context.py); here the node gets the same context, and a ``DynamicPrompt`` rebuilt
from the prompt and its ephemeral nodes: upstream's own class once ComfyUI's nodes are loaded
(every worker with ComfyUI's requirements), else :class:`PromptView`, with the same read API.
It is a copy: what a node adds to it stays in this worker (ComfyUI adds expanded nodes itself,
from the ``expand`` a node returns, which crosses back as it is).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from comfy_airlock.prompt_surface import decode_dynprompt
from comfy_airlock.worker import comfy


class PromptView:
    """``DynamicPrompt``'s API, for a worker without ComfyUI's nodes."""

    def __init__(self, original_prompt: dict[str, Any]) -> None:
        self.original_prompt = original_prompt
        self.ephemeral_prompt: dict[str, Any] = {}
        self.ephemeral_parents: dict[str, Any] = {}
        self.ephemeral_display: dict[str, Any] = {}

    def get_node(self, node_id: str) -> Any:
        for graph in (self.ephemeral_prompt, self.original_prompt):
            if node_id in graph:
                return graph[node_id]
        raise KeyError(f"Node {node_id} not found")

    def has_node(self, node_id: str) -> bool:
        return node_id in self.original_prompt or node_id in self.ephemeral_prompt

    def add_ephemeral_node(self, node_id: str, node_info: Any, parent_id: Any, display_id: Any):
        self.ephemeral_prompt[node_id] = node_info
        self.ephemeral_parents[node_id] = parent_id
        self.ephemeral_display[node_id] = display_id

    def _follow(self, links: dict[str, Any], node_id: str) -> str:
        while node_id in links:
            node_id = links[node_id]
        return node_id

    def get_real_node_id(self, node_id: str) -> str:
        return self._follow(self.ephemeral_parents, node_id)

    def get_parent_node_id(self, node_id: str) -> Any:
        return self.ephemeral_parents.get(node_id)

    def get_display_node_id(self, node_id: str) -> str:
        return self._follow(self.ephemeral_display, node_id)

    def all_node_ids(self) -> set[str]:
        return set(self.original_prompt) | set(self.ephemeral_prompt)

    def get_original_prompt(self) -> dict[str, Any]:
        return self.original_prompt


def _dynprompt_class() -> type:
    # Upstream's module imports ComfyUI's `nodes`: only taken when the worker has loaded them.
    if "nodes" in sys.modules:
        try:
            from comfy_execution.graph import DynamicPrompt

            return DynamicPrompt
        except Exception:
            pass
    return PromptView


@contextlib.contextmanager
def _executing(context: dict[str, Any]) -> Iterator[None]:
    executing = context.get("executing")
    if not executing:
        yield
        return
    try:
        from comfy_execution.graph_utils import GraphBuilder
        from comfy_execution.utils import CurrentNodeContext
    except ImportError:  # no ComfyUI tree in this worker: nothing reads the context
        yield
        return
    prefix = context.get("graph_prefix")
    if prefix:
        GraphBuilder.set_default_prefix(*prefix)
    prompt_id, node_id, list_index = executing
    with CurrentNodeContext(prompt_id, node_id, list_index):
        yield


def run(
    node_id: str,
    key: str,
    method: str,
    kwargs: dict[str, Any],
    context: dict[str, Any] | None = None,
) -> Any:
    """:func:`comfy.run` inside the node's context, its ``DYNPROMPT`` inputs filled in."""
    context = context or {}
    dynprompts = context.get("dynprompt") or {}
    if dynprompts:
        comfy.loaded_nodes()  # ComfyUI's nodes, hence upstream's DynamicPrompt, are loaded
        cls = _dynprompt_class()
        for name, state in dynprompts.items():
            kwargs[name] = decode_dynprompt(state, cls)
    with _executing(context):
        return comfy.run(node_id, key, method, kwargs)

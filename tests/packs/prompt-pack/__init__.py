"""Test pack in the shape of what real packs read of the prompt they run in, loaded both
natively (custom_nodes/) and isolated (isolated_nodes/) and compared:

- ``comfy_execution.utils.get_executing_context()`` (the prompt id, node id and list index)
  and ``PromptServer.instance.last_prompt_id``;
- the hidden inputs ``PROMPT``, ``UNIQUE_ID`` and ``DYNPROMPT`` (``DynamicPrompt``'s read API,
  on a node of the prompt and on one ComfyUI added by node expansion, whose ids come from
  ``GraphBuilder``);
- a node that takes its time (work before a later node);
- a model dropdown from ``folder_paths.get_filename_list``, which lists files added after
  ComfyUI started.

Node names start with the pack's folder name, so two copies can share one ComfyUI.
"""

from .nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]

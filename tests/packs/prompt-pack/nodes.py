import json
import os
import time

import folder_paths
from comfy_execution.graph_utils import GraphBuilder
from comfy_execution.utils import get_executing_context
from server import PromptServer

PACK = os.path.basename(os.path.dirname(os.path.abspath(__file__)))


def _context_of(unique_id, prompt, dynprompt):
    ctx = get_executing_context()
    return {
        "prompt_id": ctx.prompt_id if ctx else None,
        "node_id": ctx.node_id if ctx else None,
        "list_index": ctx.list_index if ctx else None,
        "last_prompt_id": PromptServer.instance.last_prompt_id,
        "unique_id": unique_id,
        "dynprompt": type(dynprompt).__name__,
        "class_type": dynprompt.get_node(unique_id)["class_type"],
        "has_node": dynprompt.has_node(unique_id),
        "real": dynprompt.get_real_node_id(unique_id),
        "parent": dynprompt.get_parent_node_id(unique_id),
        "display": dynprompt.get_display_node_id(unique_id),
        "all_ids": sorted(dynprompt.all_node_ids()),
        "original_is_prompt": dynprompt.get_original_prompt() == prompt,
    }


class Context:
    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {"tag": ("STRING", {"default": "x"})},
            "hidden": {"unique_id": "UNIQUE_ID", "prompt": "PROMPT", "dynprompt": "DYNPROMPT"},
        }

    RETURN_TYPES = ("STRING",)
    FUNCTION = "read"
    OUTPUT_NODE = True
    CATEGORY = "prompt-pack"

    def read(self, tag, unique_id, prompt, dynprompt):
        text = json.dumps({"tag": tag, **_context_of(unique_id, prompt, dynprompt)})
        return {"ui": {"context": [text]}, "result": (text,)}


class Expand:
    """Expands into a Context node (node expansion, as loop and switch packs do)."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"tag": ("STRING", {"default": "x"})}}

    RETURN_TYPES = ("STRING",)
    FUNCTION = "expand"
    CATEGORY = "prompt-pack"

    def expand(self, tag):
        graph = GraphBuilder()
        inner = graph.node(f"{PACK}.Context", tag=f"inner {tag}")
        return {"result": (inner.out(0),), "expand": graph.finalize()}


class Show:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"text": ("STRING", {"forceInput": True})}}

    RETURN_TYPES = ()
    FUNCTION = "show"
    OUTPUT_NODE = True
    CATEGORY = "prompt-pack"

    def show(self, text):
        return {"ui": {"text": [text]}}


class Wait:
    """Takes its time, then passes its text on (work a prompt does before a later node)."""

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "seconds": ("FLOAT", {"default": 1.0, "min": 0.0, "max": 60.0}),
                "text": ("STRING", {"default": "x"}),
            }
        }

    RETURN_TYPES = ("STRING",)
    FUNCTION = "wait"
    CATEGORY = "prompt-pack"

    def wait(self, seconds, text):
        time.sleep(seconds)
        return (text,)


class Checkpoint:
    """A model dropdown, as loader nodes have."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"ckpt_name": (folder_paths.get_filename_list("checkpoints"),)}}

    RETURN_TYPES = ()
    FUNCTION = "pick"
    OUTPUT_NODE = True
    CATEGORY = "prompt-pack"

    def pick(self, ckpt_name):
        return {"ui": {"text": [ckpt_name]}}


NODE_CLASS_MAPPINGS = {
    f"{PACK}.Context": Context,
    f"{PACK}.Expand": Expand,
    f"{PACK}.Show": Show,
    f"{PACK}.Wait": Wait,
    f"{PACK}.Checkpoint": Checkpoint,
}
NODE_DISPLAY_NAME_MAPPINGS = {k: k.split(".", 1)[1] for k in NODE_CLASS_MAPPINGS}

"""Test pack in the shape of small pure-Python utility packs (string nodes), with no
dependencies. Node names start with the pack's folder name, so copies can share one ComfyUI."""

import os

PACK = os.path.basename(os.path.dirname(os.path.abspath(__file__)))


class Echo:
    """Shows its text in the node and passes it on."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"text": ("STRING", {"forceInput": True})}}

    RETURN_TYPES = ("STRING",)
    FUNCTION = "echo"
    OUTPUT_NODE = True
    CATEGORY = "text-pack"

    def echo(self, text):
        return {"ui": {"text": [f"{PACK}: {text}"]}, "result": (text,)}


NODE_CLASS_MAPPINGS = {f"{PACK}.Echo": Echo}
NODE_DISPLAY_NAME_MAPPINGS = {f"{PACK}.Echo": f"Echo ({PACK})"}

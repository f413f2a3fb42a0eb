"""No comfy-env.toml here: comfy-env imports this folder in ComfyUI's own process."""

import sys


class PlainEcho:
    CATEGORY = "comfyenv-pack"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "echo"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"text": ("STRING", {"default": "hi"})}}

    def echo(self, text):
        out = f"{text} from {sys.prefix}"
        return {"ui": {"text": [out]}, "result": (out,)}


NODE_CLASS_MAPPINGS = {"PlainEcho": PlainEcho}

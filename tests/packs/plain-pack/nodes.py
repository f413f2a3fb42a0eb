import sys

import six  # not in ComfyUI's venv's needs: it must come from the pack's own environment


class PlainWhere:
    """Says which interpreter and which six run it (an output node: the text reaches the UI)."""

    CATEGORY = "airlock tests"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "where"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"text": ("STRING", {"default": "hi"})}}

    def where(self, text):
        report = f"{text}|{sys.prefix}|six {six.__version__} {six.__file__}"
        return {"ui": {"text": [report]}, "result": (report,)}


NODE_CLASS_MAPPINGS = {"PlainWhere": PlainWhere}
NODE_DISPLAY_NAME_MAPPINGS = {"PlainWhere": "Plain: where am I"}

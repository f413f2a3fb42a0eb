import os

PACK = os.path.basename(os.path.dirname(os.path.abspath(__file__)))


class ShowText:
    """Shows a text made from its input in the node (the frontend renders the UI output)."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"text": ("STRING", {"default": "hello", "multiline": False})}}

    RETURN_TYPES = ("STRING",)
    FUNCTION = "show"
    OUTPUT_NODE = True
    CATEGORY = "web-pack"

    def show(self, text):
        shown = f"{PACK} says {text!r} ({len(text)} chars)"
        return {"ui": {"text": [shown]}, "result": (shown,)}


NODE_CLASS_MAPPINGS = {f"{PACK}.ShowText": ShowText}
NODE_DISPLAY_NAME_MAPPINGS = {f"{PACK}.ShowText": f"Show Text ({PACK})"}

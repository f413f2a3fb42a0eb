"""Opt-in isolation: ComfyUI imports this file in its own process; it imports no pack code."""

from comfy_airlock import register_nodes

NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS = register_nodes(__file__)

"""Nodes that import ``comfy.model_management`` only when they run, so the first of them to run
in a worker is that module's first import there (tests/comfyui/test_interrupts.py). Nothing at
the top of this pack imports ComfyUI."""

from .nodes import NODE_CLASS_MAPPINGS

NODE_DISPLAY_NAME_MAPPINGS = {k: k.replace("Airlock", "Airlock ") for k in NODE_CLASS_MAPPINGS}

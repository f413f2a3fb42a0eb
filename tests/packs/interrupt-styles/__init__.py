"""One node per way a pack reaches ComfyUI's interrupt check (tests/comfyui/test_interrupts.py):
a module imported at the top, functions imported by name, an import inside the node."""

from .nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]

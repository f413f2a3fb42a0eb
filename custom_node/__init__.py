"""comfy-airlock for ComfyUI: runs the node packs in ``isolated_nodes/`` (next to
``custom_nodes/``) in their own environments, as persistent worker processes, with their nodes
registered here like native ones.

Install: ``pip install comfy-airlock`` into ComfyUI's Python, then copy (or link) this folder to
``ComfyUI/custom_nodes/comfy-airlock``. See docs/user-guide.md.
"""

import logging

try:
    from comfy_airlock.host import load_isolated_packs
except ImportError as e:  # comfy-airlock is not installed in ComfyUI's environment
    logging.getLogger("comfy_airlock").error(
        "[comfy-airlock] cannot import comfy_airlock (%s): install it into ComfyUI's Python "
        "with `pip install comfy-airlock`; no isolated pack is loaded",
        e,
    )
    NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS = {}, {}
else:
    NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS = load_isolated_packs()

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]

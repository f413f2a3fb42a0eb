"""Test pack with a frontend extension, in the shape of popular packs that display a node's
output in its node (a "show text" node) and add widgets from JavaScript: ``WEB_DIRECTORY``
names ``web/``, whose ``js/`` modules import ``app`` and ``ComfyWidgets`` from the frontend,
a sibling module by a relative import, and a stylesheet by URL. Its ``pyproject.toml`` names a
second folder through ``[tool.comfy] web``, as packs with a built frontend do. A third,
``injected/``, it puts into ``nodes.EXTENSION_WEB_DIRS`` itself under a name of its own, as
ComfyUI-Impact-Pack does.

Node names start with the pack's folder name, so a native and an isolated copy can share one
ComfyUI (tests/comfyui/test_pack_web.py).
"""

import os

import nodes as comfy_nodes  # ComfyUI's (the pack's own nodes.py is .nodes)

from .nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS

_HERE = os.path.dirname(os.path.realpath(__file__))
comfy_nodes.EXTENSION_WEB_DIRS[os.path.basename(_HERE) + "-injected"] = os.path.join(
    _HERE, "injected"
)

WEB_DIRECTORY = "./web"

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY"]

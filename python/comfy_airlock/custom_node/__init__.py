"""comfy-airlock for ComfyUI: runs the node packs in ``isolated_nodes/`` (next to
``custom_nodes/``) in their own environments, as persistent worker processes, with their nodes
registered here like native ones.

Installed by ``airlock install --comfyui DIR`` (after installing the comfy-airlock wheel into
ComfyUI's Python), which copies this folder to ``custom_nodes/comfy-airlock``. See
docs/user-guide.md, section 1.
"""

import logging
import sys

try:
    from comfy_airlock.host import load_isolated_packs
except ImportError as e:  # comfy-airlock is not installed in ComfyUI's environment
    logging.getLogger("comfy_airlock").error(
        "[comfy-airlock] cannot import comfy_airlock (%s): install its wheel into the Python "
        "that runs ComfyUI (%s -m pip install comfy_airlock-*.whl; the wheel is built by "
        "`make wheel` in a comfy-airlock checkout), then restart ComfyUI. "
        "No isolated pack is loaded",
        e,
        sys.executable,
    )
    NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS = {}, {}
else:
    NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS = load_isolated_packs()
    from comfy_airlock.host.panel import mount as _mount_panel

    _mount_panel()  # the panel's routes, and its updates over ComfyUI's websocket

# The sidebar panel (web/airlock_panel.js and web/airlock_panel/): the isolated packs, their
# workers, models and memory, live (docs/adr/0026-panel-data-flow.md); and the loader of
# isolated packs' own frontend extensions (web/isolated_extensions.js, ADR 0021).
WEB_DIRECTORY = "./web"

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY"]

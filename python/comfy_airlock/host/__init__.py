"""The ComfyUI side of comfy-airlock, in the host process: discovery, environments, proxies.

Imported by the ``custom_node/`` package that a user drops into ``custom_nodes/``, or by a
pack's own ``__init__.py`` through :func:`comfy_airlock.register_nodes`.
"""

from comfy_airlock import compat as _compat
from comfy_airlock.host.loader import (
    load_isolated_packs,
    load_pack,
    register_nodes,
    status,
)

# comfy-env packs in custom_nodes/ imported after this point find comfy_env even without the
# .pth file (`airlock install` writes it); an installed comfy-env still comes first.
_compat.add_to_path()

__all__ = ["load_isolated_packs", "load_pack", "register_nodes", "status"]

"""A pack written for custom_nodes/, in the shape of most real ones: its __init__.py imports its
nodes, and requirements.txt / pyproject.toml list what it needs. It knows nothing of
comfy-airlock: `airlock isolate` turns it into an isolated pack (tests/test_isolate.py,
tests/comfyui/test_wheel_install.py)."""

from .nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]

"""Test pack in the shape of model-side public packs (a ControlNet-weights pack, a detector
pack, a model-patching pack): its nodes hand each other objects of the pack's own classes and
model objects, which ComfyUI only carries from one node to the next. Written for
``custom_nodes/`` (a requirements.txt, no airlock.toml: ``airlock isolate`` writes it), and
importing ComfyUI's model management at import, as most packs do."""

import comfy.model_management  # noqa: F401  (at import, as most packs do)

from .objects.nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]

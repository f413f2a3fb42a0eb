"""Test pack in the shape of image-filter packs (PIL per image, torch on the batch, helpers in
their own module, one module per group of nodes, mappings merged here): the prompt-level
benchmark (bench/prompt.py) runs a workflow of its nodes isolated and natively."""

from .nodes import blur, tensor_ops

NODE_CLASS_MAPPINGS = {}
NODE_DISPLAY_NAME_MAPPINGS = {}
for module in (blur, tensor_ops):
    NODE_CLASS_MAPPINGS.update(module.NODE_CLASS_MAPPINGS)
    NODE_DISPLAY_NAME_MAPPINGS.update(module.NODE_DISPLAY_NAME_MAPPINGS)

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]

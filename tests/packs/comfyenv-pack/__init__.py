"""A pack written for comfy-env, in the layout comfy-env documents and its author's packs use
(ComfyUI-SAM3DBody, ComfyUI-GeometryPack): the root only registers, each env lives in
nodes/<sub>/ with its comfy-env.toml. comfy-airlock must load it without any edit."""

from comfy_env import register_nodes

NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS = register_nodes()

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]

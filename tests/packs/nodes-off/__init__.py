"""Test pack for ``comfy-nodes = false`` (ADR 0060), in the shape of a pack that uses torch and
ComfyUI's model management but none of ComfyUI's nodes: it imports what it uses itself.
Driven by tests/comfyui/comfy_nodes_scenario.py, which also runs a copy without the line."""

import sys

import torch

# What ComfyUI had imported when this pack's import began.
AT_IMPORT = {m: m in sys.modules for m in ("nodes", "comfy_extras.nodes_latent", "comfy.samplers")}


def at_import():
    return AT_IMPORT


def uses_comfy():
    """What a node of such a pack does: ComfyUI's model management, imported where used, and
    ComfyUI's ``nodes`` too, imported late (without its builtin extra nodes)."""
    import comfy.model_management as mm
    import nodes

    return {
        "device": str(mm.get_torch_device()),
        "vae_decode": "VAEDecode" in nodes.NODE_CLASS_MAPPINGS,
        "own_node": nodes.NODE_CLASS_MAPPINGS.get("NodesOffAdd") is NodesOffAdd,
        "extras": "LatentAdd" in nodes.NODE_CLASS_MAPPINGS,
    }


class NodesOffAdd:
    CATEGORY = "airlock-tests"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",)}}

    def run(self, image):
        return (torch.clamp(image + 0.1, 0, 1),)


NODE_CLASS_MAPPINGS = {"NodesOffAdd": NodesOffAdd}

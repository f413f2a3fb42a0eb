"""A pack that changes ComfyUI's behaviour by replacing its functions when it is imported, in
the shape of smZNodes (``comfy.samplers.KSampler.sample``) and of the prompt and XY packs
(``execution.validate_inputs``). Each replacement calls the original, so natively it changes
nothing (tests/comfyui/test_pack_patches.py)."""

import comfy.samplers
import execution

_sample = comfy.samplers.KSampler.sample


def _wrapped_sample(self, *args, **kwargs):
    return _sample(self, *args, **kwargs)


comfy.samplers.KSampler.sample = _wrapped_sample

_validate_inputs = execution.validate_inputs


def _wrapped_validate_inputs(*args, **kwargs):
    return _validate_inputs(*args, **kwargs)


execution.validate_inputs = _wrapped_validate_inputs


class PatchingPackEcho:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"text": ("STRING", {"default": "patched"})}}

    RETURN_TYPES = ("STRING",)
    FUNCTION = "run"
    CATEGORY = "airlock/tests"

    def run(self, text):
        return (text,)


NODE_CLASS_MAPPINGS = {"PatchingPackEcho": PatchingPackEcho}

"""A member in the shape of ComfyUI-Inspire-Pack: it finds the other pack's node class in
``nodes.NODE_CLASS_MAPPINGS`` (at import, and at run time as Inspire's ``impact_sampling``
does) and calls its static method on a value the other pack's node made."""

import os

import nodes

SAW_CORE_AT_IMPORT = "RegionalCoreSampler" in nodes.NODE_CLASS_MAPPINGS
WEB_DIRECTORY = "js"


class RegionalExtrasSample:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",), "regional_prompts": ("REGIONAL_PROMPTS",)}}

    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "doit"
    OUTPUT_NODE = True
    CATEGORY = "tests/regional"

    def doit(self, image, regional_prompts):
        if "RegionalCoreSampler" not in nodes.NODE_CLASS_MAPPINGS:
            raise Exception("[ERROR] You need to install 'regional-core'")
        sampler = nodes.NODE_CLASS_MAPPINGS["RegionalCoreSampler"]
        out = sampler.separated_sample(image, regional_prompts, scale=2.0)
        first = type(regional_prompts[0])
        text = (
            f"prestartup: {os.environ.get('REGIONAL_CORE_PRESTARTUP')}; "
            f"core at import: {SAW_CORE_AT_IMPORT}; "
            f"regions: {len(regional_prompts)} {first.__module__}.{first.__qualname__}; "
            f"shared: {nodes.NODE_CLASS_MAPPINGS['RegionalShared'].WHO}; "
            f"mean: {out.mean().item():.4f}"
        )
        return {"ui": {"text": [text]}, "result": (out,)}


class RegionalShared:
    """The same node id as regional-core's: this later pack's class replaces it."""

    WHO = "regional-extras"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    RETURN_TYPES = ("STRING",)
    FUNCTION = "doit"
    CATEGORY = "tests/regional"

    def doit(self):
        return (self.WHO,)


NODE_CLASS_MAPPINGS = {
    "RegionalExtrasSample": RegionalExtrasSample,
    "RegionalShared": RegionalShared,
}

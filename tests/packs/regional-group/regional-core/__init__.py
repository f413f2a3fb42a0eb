"""A member in the shape of ComfyUI-Impact-Pack's regional sampling: nodes that pass a class
of the pack's own (Impact's REGIONAL_PROMPTS, SEGS) and a node class whose static method
another pack calls (Impact's ``RegionalSampler.separated_sample``, called by Inspire Pack)."""

from .core.regions import RegionalPrompt

WEB_DIRECTORY = "./js"


class RegionalCoreRegions:
    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "image": ("IMAGE",),
                "strength": ("FLOAT", {"default": 0.125, "min": 0.0, "max": 1.0}),
                "count": ("INT", {"default": 1, "min": 1, "max": 8}),
            }
        }

    RETURN_TYPES = ("REGIONAL_PROMPTS",)
    FUNCTION = "doit"
    CATEGORY = "tests/regional"

    def doit(self, image, strength, count):
        mask = image[..., 0] * 0 + 1
        return ([RegionalPrompt(mask, strength) for _ in range(count)],)


class RegionalCoreSampler:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",), "regional_prompts": ("REGIONAL_PROMPTS",)}}

    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "doit"
    CATEGORY = "tests/regional"

    @staticmethod
    def separated_sample(image, regional_prompts, *, scale=1.0):
        out = image.clone()
        for rp in regional_prompts:
            if not isinstance(rp, RegionalPrompt):
                raise TypeError(f"not a regional prompt: {type(rp).__module__}.{type(rp).__name__}")
            out = out + rp.mask.unsqueeze(-1) * rp.strength * scale
        return out

    def doit(self, image, regional_prompts):
        return (self.separated_sample(image, regional_prompts),)


class RegionalShared:
    """A node id both members define: natively the later pack's class replaces this one."""

    WHO = "regional-core"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    RETURN_TYPES = ("STRING",)
    FUNCTION = "doit"
    CATEGORY = "tests/regional"

    def doit(self):
        return (self.WHO,)


NODE_CLASS_MAPPINGS = {
    "RegionalCoreRegions": RegionalCoreRegions,
    "RegionalCoreSampler": RegionalCoreSampler,
    "RegionalShared": RegionalShared,
}

import torch
from PIL import ImageFilter

from ..imagefunc import NODE_PREFIX, log, pil2tensor, tensor2pil


class GaussianBlur:
    """PIL's Gaussian blur, image by image: the way most image packs filter."""

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "image": ("IMAGE",),
                "radius": ("FLOAT", {"default": 2.0, "min": 0.1, "max": 100.0, "step": 0.1}),
            }
        }

    RETURN_TYPES = ("IMAGE",)
    RETURN_NAMES = ("image",)
    FUNCTION = "blur"
    CATEGORY = f"{NODE_PREFIX}/filter"

    def blur(self, image, radius):
        out = []
        for one in image:
            pil = tensor2pil(torch.unsqueeze(one, 0)).convert("RGB")
            out.append(pil2tensor(pil.filter(ImageFilter.GaussianBlur(radius))))
        log(f"GaussianBlur: {len(out)} image(s)")
        return (torch.cat(out, dim=0),)


NODE_CLASS_MAPPINGS = {f"{NODE_PREFIX}: GaussianBlur": GaussianBlur}
NODE_DISPLAY_NAME_MAPPINGS = {f"{NODE_PREFIX}: GaussianBlur": "Gaussian Blur (airlock filters)"}

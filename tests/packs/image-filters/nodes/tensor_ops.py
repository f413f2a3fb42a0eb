import torch
import torch.nn.functional as F

from ..imagefunc import NODE_PREFIX, log


class Sharpen:
    """A 3x3 sharpening kernel as a depthwise convolution on the whole batch."""

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "image": ("IMAGE",),
                "alpha": ("FLOAT", {"default": 1.0, "min": 0.0, "max": 5.0, "step": 0.05}),
            }
        }

    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "sharpen"
    CATEGORY = f"{NODE_PREFIX}/filter"

    def sharpen(self, image, alpha):
        b, c = image.shape[0], image.shape[3]
        kernel = torch.tensor([[0.0, -1.0, 0.0], [-1.0, 4.0, -1.0], [0.0, -1.0, 0.0]]) * alpha
        kernel[1, 1] += 1.0
        kernel = kernel.to(image).repeat(c, 1, 1, 1)
        x = image.permute(0, 3, 1, 2)
        y = F.conv2d(F.pad(x, (1, 1, 1, 1), mode="reflect"), kernel, groups=c)
        log(f"Sharpen: {b} image(s)")
        return (torch.clamp(y, 0, 1).permute(0, 2, 3, 1),)


class ColorAdjust:
    """Brightness, contrast and saturation, in torch."""

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "image": ("IMAGE",),
                "brightness": ("FLOAT", {"default": 1.0, "min": 0.0, "max": 3.0, "step": 0.01}),
                "contrast": ("FLOAT", {"default": 1.0, "min": 0.0, "max": 3.0, "step": 0.01}),
                "saturation": ("FLOAT", {"default": 1.0, "min": 0.0, "max": 3.0, "step": 0.01}),
            }
        }

    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "adjust"
    CATEGORY = f"{NODE_PREFIX}/color"

    def adjust(self, image, brightness, contrast, saturation):
        x = image * brightness
        mean = x.mean(dim=(1, 2, 3), keepdim=True)
        x = (x - mean) * contrast + mean
        gray = (x * torch.tensor([0.299, 0.587, 0.114]).to(x)).sum(dim=-1, keepdim=True)
        x = (x - gray) * saturation + gray
        log(f"ColorAdjust: {image.shape[0]} image(s)")
        return (torch.clamp(x, 0, 1),)


class ImageScaleBy:
    """Resizes the batch by a factor (bicubic), as upscale helpers do."""

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "image": ("IMAGE",),
                "scale_by": ("FLOAT", {"default": 0.5, "min": 0.05, "max": 4.0, "step": 0.05}),
            }
        }

    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "scale"
    CATEGORY = f"{NODE_PREFIX}/transform"

    def scale(self, image, scale_by):
        x = image.permute(0, 3, 1, 2)
        y = F.interpolate(x, scale_factor=scale_by, mode="bicubic", align_corners=False)
        return (torch.clamp(y, 0, 1).permute(0, 2, 3, 1),)


NODE_CLASS_MAPPINGS = {
    f"{NODE_PREFIX}: Sharpen": Sharpen,
    f"{NODE_PREFIX}: ColorAdjust": ColorAdjust,
    f"{NODE_PREFIX}: ImageScaleBy": ImageScaleBy,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    f"{NODE_PREFIX}: Sharpen": "Sharpen (airlock filters)",
    f"{NODE_PREFIX}: ColorAdjust": "Color Adjust (airlock filters)",
    f"{NODE_PREFIX}: ImageScaleBy": "Scale By (airlock filters)",
}

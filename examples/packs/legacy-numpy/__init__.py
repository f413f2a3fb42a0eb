"""Example pack with dependencies that conflict with ComfyUI's: Python 3.10 and numpy 1.x.

Imported into ComfyUI's own process (numpy 2) it fails at import, because numpy 2 removed
``np.float_``. Isolated by comfy-airlock it runs in its own environment. It has no torch: IMAGE
tensors arrive as numpy arrays (zero-copy views of the shared memory), and the arrays it
returns become tensors again on ComfyUI's side.
"""

import numpy as np

# numpy 1.x API, gone in numpy 2: this line is what breaks the pack in ComfyUI's environment.
WORK_DTYPE = np.float_


class LegacyNoiseImage:
    """A reproducible RGB noise image, made with numpy 1's legacy RandomState."""

    CATEGORY = "airlock examples"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "make"
    DESCRIPTION = "Noise from numpy 1.x's RandomState, which numpy 2 no longer guarantees."

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "width": ("INT", {"default": 64, "min": 8, "max": 4096, "step": 8}),
                "height": ("INT", {"default": 64, "min": 8, "max": 4096, "step": 8}),
                "seed": ("INT", {"default": 0, "min": 0, "max": 2**32 - 1}),
            }
        }

    def make(self, width, height, seed):
        rng = np.random.RandomState(seed)
        image = rng.random_sample((1, height, width, 3)).astype(np.float32)
        return (image,)


class LegacyPosterize:
    """Reduces each channel to a few levels, computed in float64 (``np.float_``)."""

    CATEGORY = "airlock examples"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "posterize"

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "image": ("IMAGE",),
                "levels": ("INT", {"default": 4, "min": 2, "max": 256}),
            }
        }

    def posterize(self, image, levels):
        x = np.asarray(image, dtype=WORK_DTYPE)
        out = np.round(x * (levels - 1)) / (levels - 1)
        return (out.astype(np.float32),)


class LegacyVersions:
    """Reports the interpreter and numpy this pack really runs with (a STRING output)."""

    CATEGORY = "airlock examples"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "versions"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    def versions(self):
        import platform

        return (f"python {platform.python_version()}, numpy {np.__version__}",)


NODE_CLASS_MAPPINGS = {
    "LegacyNoiseImage": LegacyNoiseImage,
    "LegacyPosterize": LegacyPosterize,
    "LegacyVersions": LegacyVersions,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "LegacyNoiseImage": "Legacy Noise Image (numpy 1, Python 3.10)",
    "LegacyPosterize": "Legacy Posterize (numpy 1, Python 3.10)",
    "LegacyVersions": "Legacy Versions",
}

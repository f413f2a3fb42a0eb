import numpy as np
import torch

from .types import SEG, Keyframe, TintModel, WeightSchedule

CATEGORY = "pack objects"


class ScheduleMake:
    CATEGORY = CATEGORY
    RETURN_TYPES = ("PO_SCHEDULE",)
    FUNCTION = "make"

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "base": ("FLOAT", {"default": 0.8, "min": 0.0, "max": 2.0}),
                "steps": ("INT", {"default": 4, "min": 1, "max": 64}),
            }
        }

    def make(self, base, steps):
        return (WeightSchedule(base, steps),)


class ScheduleApply:
    CATEGORY = CATEGORY
    RETURN_TYPES = ("IMAGE", "STRING")
    FUNCTION = "apply"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",), "schedule": ("PO_SCHEDULE",)}}

    def apply(self, image, schedule):
        out = torch.stack([image[0] * schedule.at(i) for i in range(len(schedule.weights))])
        return (out, ",".join(f"{w:.4f}" for w in schedule.weights))


class KeyframeMake:
    CATEGORY = CATEGORY
    RETURN_TYPES = ("PO_KEYFRAME",)
    FUNCTION = "make"

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {"start": ("FLOAT", {"default": 0.25}), "strength": ("FLOAT", {})},
            "optional": {"previous": ("PO_KEYFRAME",)},
        }

    def make(self, start, strength, previous=None):
        chain = list(previous) if previous is not None else []
        return ([*chain, Keyframe(start, strength, f"kf{len(chain)}")],)


class SegsDetect:
    CATEGORY = CATEGORY
    RETURN_TYPES = ("PO_SEGS",)
    FUNCTION = "detect"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",), "threshold": ("FLOAT", {"default": 0.5})}}

    def detect(self, image, threshold):
        arr = image[0].numpy()
        h, w = arr.shape[:2]
        segs = [
            SEG(arr[: h // 2, : w // 2].copy(), (0, 0, w // 2, h // 2), "top-left", threshold),
            SEG(arr[h // 2 :, w // 2 :].copy(), (w // 2, h // 2, w, h), "bottom-right", 0.9),
        ]
        return (((h, w), segs),)


class SegsToMask:
    CATEGORY = CATEGORY
    RETURN_TYPES = ("MASK", "STRING")
    FUNCTION = "mask"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"segs": ("PO_SEGS",)}}

    def mask(self, segs):
        (h, w), items = segs
        mask = np.zeros((h, w), dtype=np.float32)
        for seg in items:
            x1, y1, x2, y2 = seg.crop_region
            mask[y1:y2, x1:x2] = seg.cropped_image.mean(axis=-1) * seg.confidence
        labels = ",".join(seg.label for seg in items)
        return (torch.from_numpy(mask)[None], labels)


class TintLoader:
    CATEGORY = CATEGORY
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "load"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"tint": ("FLOAT", {"default": 0.3, "min": 0.0, "max": 1.0})}}

    def load(self, tint):
        return (TintModel(tint),)


class TintApply:
    CATEGORY = CATEGORY
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "apply"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "image": ("IMAGE",)}}

    def apply(self, model, image):
        with torch.no_grad():
            return (model(image),)


NODE_CLASS_MAPPINGS = {
    "POScheduleMake": ScheduleMake,
    "POScheduleApply": ScheduleApply,
    "POKeyframeMake": KeyframeMake,
    "POSegsDetect": SegsDetect,
    "POSegsToMask": SegsToMask,
    "POTintLoader": TintLoader,
    "POTintApply": TintApply,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    k: k.removeprefix("PO").replace("Make", " Make") for k in NODE_CLASS_MAPPINGS
}

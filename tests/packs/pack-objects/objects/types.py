"""The pack's own value types, as such packs define them: a plain class without ``__repr__``
(a weights schedule), a dataclass (a keyframe), a named tuple of arrays (a detector's
segment), a model wrapper (``torch.nn.Module``)."""

from collections import namedtuple
from dataclasses import dataclass

import torch

SEG = namedtuple("SEG", ["cropped_image", "crop_region", "label", "confidence"])


class WeightSchedule:
    def __init__(self, base: float, steps: int):
        self.weights = [base * (0.5**i) for i in range(steps)]

    def at(self, i: int) -> float:
        return self.weights[min(i, len(self.weights) - 1)]


@dataclass
class Keyframe:
    start: float
    strength: float
    label: str = "kf"


class TintModel(torch.nn.Module):
    def __init__(self, tint: float):
        super().__init__()
        self.tint = torch.nn.Parameter(torch.tensor([tint, 1.0 - tint, 0.5]))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return image * self.tint

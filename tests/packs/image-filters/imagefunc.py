"""Helpers in the shape image packs keep next to their nodes: IMAGE (a float batch, B x H x W x
C in 0..1) to PIL and back, and a log line per node."""

import logging

import numpy as np
import torch
from PIL import Image

NODE_PREFIX = "AirlockFilter"
logger = logging.getLogger("airlock_image_filters")


def log(message: str) -> None:
    logger.info(f"[{NODE_PREFIX}] {message}")


def tensor2pil(image: torch.Tensor) -> Image.Image:
    arr = np.clip(255.0 * image.cpu().numpy().squeeze(), 0, 255).astype(np.uint8)
    return Image.fromarray(arr)


def pil2tensor(image: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.array(image).astype(np.float32) / 255.0).unsqueeze(0)

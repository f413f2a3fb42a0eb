"""Example pack (ComfyUI's V3 node API) that holds a small torch model across calls.

The model is built on first use and kept by the worker process, as a real pack keeps its
weights between prompts; ``TinyModelInfo`` reports how often it was loaded. It is registered
with comfy-airlock, so it appears in ComfyUI's own list of loaded models and ComfyUI can unload
it (the Free button, an out-of-memory error, room for another model); the node loads it back
when it runs again. The enhance node
reports progress through ``comfy.utils.ProgressBar``, which reaches ComfyUI's UI from the
worker.
"""

import comfy.model_management
import comfy.utils
import torch
from comfy_api.latest import ComfyExtension, io
from typing_extensions import override

import comfy_airlock
from comfy_airlock.worker.models import using

_MODEL = None
_LOADS = 0


def tiny_model():
    """A 3→16→3 convolutional net with fixed weights (seeded), loaded once per process."""
    global _MODEL, _LOADS
    if _MODEL is None:
        gen = torch.Generator().manual_seed(1234)
        net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(16, 3, 3, padding=1),
        )
        with torch.no_grad():
            for p in net.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
        device = comfy.model_management.get_torch_device()
        _MODEL = net.eval().to(device)
        comfy_airlock.register_model(_MODEL, name="tiny-model", device=str(device))
        _LOADS += 1
    return _MODEL


class TinyModelEnhance(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="TinyModelEnhance",
            display_name="Tiny Model Enhance (isolated, torch)",
            category="airlock examples",
            description="Adds a small learned residual to an image, in steps.",
            inputs=[
                io.Image.Input("image"),
                io.Float.Input("strength", default=1.0, min=0.0, max=10.0, step=0.1),
                io.Int.Input("steps", default=4, min=1, max=100),
            ],
            outputs=[io.Image.Output()],
        )

    @classmethod
    def execute(cls, image, strength, steps) -> io.NodeOutput:
        model = tiny_model()
        device = comfy.model_management.get_torch_device()
        x = image.to(device).movedim(-1, 1)
        bar = comfy.utils.ProgressBar(steps)
        with torch.no_grad(), using(model):
            for _ in range(steps):
                x = (x + strength / steps * model(x)).clamp(0.0, 1.0)
                bar.update(1)
        out = x.movedim(1, -1).to(comfy.model_management.intermediate_device())
        return io.NodeOutput(out.contiguous())


class TinyModelInfo(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="TinyModelInfo",
            display_name="Tiny Model Info",
            category="airlock examples",
            inputs=[io.Image.Input("image")],
            outputs=[io.String.Output()],
            hidden=[io.Hidden.unique_id],
        )

    @classmethod
    def execute(cls, image) -> io.NodeOutput:
        model = tiny_model()
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        text = (
            f"node {cls.hidden.unique_id}: torch {torch.__version__}, loads={_LOADS}, "
            f"params={params} bytes, image={tuple(image.shape)}"
        )
        return io.NodeOutput(text)


class TinyModelExtension(ComfyExtension):
    @override
    async def get_node_list(self) -> list[type[io.ComfyNode]]:
        return [TinyModelEnhance, TinyModelInfo]


async def comfy_entrypoint() -> TinyModelExtension:
    return TinyModelExtension()

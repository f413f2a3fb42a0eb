"""Test pack for the end-to-end tests: one node per behaviour that must survive isolation."""

import os

import comfy.model_management
import comfy.utils
import folder_paths
import torch
from comfy.cli_args import args
from PIL import Image
from server import PromptServer


def _fail_deep(reason):
    if reason.startswith("key:"):  # a lookup that misses, as packs' dict reads do
        raise KeyError(reason[4:])
    if reason == "stop":  # a "queue stop" node: ComfyUI's interrupt, raised by the node itself
        import comfy.model_management

        raise comfy.model_management.InterruptProcessingException()
    raise ValueError(f"e2e: deliberate failure in the worker ({reason})")


class E2EScale:
    """IMAGE * factor; no IS_CHANGED, so ComfyUI's cache serves a second identical run."""

    CATEGORY = "airlock tests"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "scale"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",), "factor": ("FLOAT", {"default": 0.5})}}

    def scale(self, image, factor):
        return (image * factor,)


class E2EFail:
    CATEGORY = "airlock tests"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "fail"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",), "reason": ("STRING", {"default": "boom"})}}

    def fail(self, image, reason):
        _fail_deep(reason)


class E2EReport:
    """Output node: shows its text, what the hidden inputs carried, and where it wrote a file
    (the host's output directory, mirrored into the worker)."""

    CATEGORY = "airlock tests"
    RETURN_TYPES = ()
    FUNCTION = "report"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {"text": ("STRING", {"forceInput": True})},
            "hidden": {"unique_id": "UNIQUE_ID", "prompt": "PROMPT", "extra": "EXTRA_PNGINFO"},
        }

    def report(self, text, unique_id=None, prompt=None, extra=None):
        path = os.path.join(folder_paths.get_output_directory(), f"e2e-report-{unique_id}.txt")
        with open(path, "w") as f:
            f.write(text)
        hidden = f"unique_id={unique_id} prompt_nodes={len(prompt or {})} extra={extra}"
        return {"ui": {"text": [text, hidden, path]}}


class E2EValidated:
    """VALIDATE_INPUTS and IS_CHANGED, both forwarded to the worker."""

    CATEGORY = "airlock tests"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "echo"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"text": ("STRING", {"default": "hello"})}}

    @classmethod
    def VALIDATE_INPUTS(cls, text):
        if text == "bad":
            return "e2e: the worker refused text 'bad'"
        return True

    @classmethod
    def IS_CHANGED(cls, text):
        return f"{text}-{os.environ.get('E2E_SALT', '')}"

    def echo(self, text):
        return (f"echo:{text}",)


class E2ELazy:
    """Lazy inputs: check_lazy_status runs in the worker and asks only for the chosen input."""

    CATEGORY = "airlock tests"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "pick"

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "use_a": ("BOOLEAN", {"default": True}),
                "a": ("STRING", {"lazy": True, "forceInput": True}),
                "b": ("STRING", {"lazy": True, "forceInput": True}),
            }
        }

    def check_lazy_status(self, use_a, a=None, b=None):
        return ["a"] if use_a else ["b"]

    def pick(self, use_a, a=None, b=None):
        return (f"lazy:{a if use_a else b}",)


class E2EProgress:
    """Progress bar ticks and a custom UI message, from the worker to the host's websocket."""

    CATEGORY = "airlock tests"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "work"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"steps": ("INT", {"default": 3})}}

    def work(self, steps):
        bar = comfy.utils.ProgressBar(steps)
        for i in range(steps):
            PromptServer.instance.send_sync("airlock-e2e", {"step": i})
            preview = ("JPEG", Image.new("RGB", (16, 16), (255, 0, 0)), 512) if i == 1 else None
            bar.update_absolute(i + 1, steps, preview)
        return (f"progress:{steps}",)


class E2EState:
    """State kept on ``self`` persists between runs of the same node, as in-process."""

    CATEGORY = "airlock tests"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "count"

    def __init__(self):
        self.runs = 0

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"tag": ("STRING", {"default": "x"})}}

    @classmethod
    def IS_CHANGED(cls, tag):
        return float("nan")  # always re-run

    def count(self, tag):
        self.runs += 1
        return (f"runs:{self.runs}",)


class E2EComfyState:
    """What the worker's ComfyUI looks like: the host's flags and folders, mirrored."""

    CATEGORY = "airlock tests"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "state"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    def state(self):
        device = comfy.model_management.get_torch_device()
        return (f"cpu={args.cpu} device={device} output={folder_paths.get_output_directory()}",)


class E2EBornStats:
    """How many of this worker's outputs were sent born in shared memory so far (ADR 0044): a
    probe for the tests, as E2EComfyState is; a real pack never asks."""

    CATEGORY = "airlock tests"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "stats"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",)}}

    @classmethod
    def IS_CHANGED(cls, image):
        return float("nan")  # always re-run

    def stats(self, image):
        from comfy_airlock import _native

        s = _native.born_stats()
        return ("off" if s is None else f"sent={s['sent']} refused={s['refused']}",)


class E2ELatentShift:
    """LATENT dicts cross both ways (with their extra keys)."""

    CATEGORY = "airlock tests"
    RETURN_TYPES = ("LATENT",)
    FUNCTION = "shift"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"samples": ("LATENT",), "amount": ("FLOAT", {"default": 1.0})}}

    def shift(self, samples, amount):
        out = dict(samples)
        out["samples"] = samples["samples"] + amount
        out["airlock"] = "shifted"
        return (out,)


class E2ELatentInfo:
    CATEGORY = "airlock tests"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "info"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"samples": ("LATENT",)}}

    def info(self, samples):
        s = samples["samples"]
        return (f"latent {tuple(s.shape)} mean={float(s.mean()):.3f} tag={samples.get('airlock')}",)


class E2EConditioning:
    """CONDITIONING: a list of [tensor, dict-with-tensors], made here, read back by the next."""

    CATEGORY = "airlock tests"
    RETURN_TYPES = ("CONDITIONING",)
    FUNCTION = "make"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"tokens": ("INT", {"default": 77})}}

    def make(self, tokens):
        cond = torch.ones(1, tokens, 8)
        return ([[cond, {"pooled_output": torch.full((1, 8), 2.0), "area": (8, 8, 0, 0)}]],)


class E2EConditioningInfo:
    CATEGORY = "airlock tests"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "info"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"conditioning": ("CONDITIONING",)}}

    def info(self, conditioning):
        [[cond, extra]] = conditioning
        pooled = float(extra["pooled_output"].sum())
        return (f"cond {tuple(cond.shape)} pooled={pooled} area={tuple(extra['area'])}",)


class E2EModelOut:
    """Returns a model object, which stays in the worker (ComfyUI holds a reference)."""

    CATEGORY = "airlock tests"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "load"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    def load(self):
        return (torch.nn.Linear(2, 2),)


NODE_CLASS_MAPPINGS = {
    "E2EScale": E2EScale,
    "E2EFail": E2EFail,
    "E2EReport": E2EReport,
    "E2EValidated": E2EValidated,
    "E2ELazy": E2ELazy,
    "E2EProgress": E2EProgress,
    "E2EState": E2EState,
    "E2EComfyState": E2EComfyState,
    "E2EBornStats": E2EBornStats,
    "E2ELatentShift": E2ELatentShift,
    "E2ELatentInfo": E2ELatentInfo,
    "E2EConditioning": E2EConditioning,
    "E2EConditioningInfo": E2EConditioningInfo,
    "E2EModelOut": E2EModelOut,
}

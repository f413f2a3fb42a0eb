"""Test pack in the shape of popular public packs: at import it leans on what ComfyUI has
done before any custom node loads (ComfyUI's own and builtin extra nodes imported, its
prestartup script run, ComfyUI's main.py as the program), and it has the odd nodes ComfyUI
tolerates. Loaded natively and isolated, both must look and compute the same."""

import hashlib
import json
import os
import sys

import comfy  # comfy.samplers is used below without importing it, as packs do
import comfy_extras  # the same for comfy_extras.nodes_model_merging
import folder_paths
import nodes
import torch
from comfy_api.latest import io
from comfy_execution.graph_utils import ExecutionBlocker
from comfy_extras.nodes_latent import LatentAdd  # circular natively unless nodes loaded first

import __main__

# KeyError unless the prestartup script ran first.
LLM_DIRS = folder_paths.folder_names_and_paths["llm"][0]
# How packs find ComfyUI's directory (some then write their web files next to it).
COMFY_DIR = os.path.dirname(os.path.abspath(__main__.__file__))
MergeBase = comfy_extras.nodes_model_merging.ModelMergeBlocks


class ShapesSampler:
    CATEGORY = "airlock shapes"
    RETURN_TYPES = ("STRING",)
    RETURN_NAMES = ("summary",)
    OUTPUT_TOOLTIPS = ("sampler, scheduler and size",)
    FUNCTION = "pick"
    DESCRIPTION = "Reads comfy.samplers and nodes.MAX_RESOLUTION at import, as samplers do."

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "sampler_name": (comfy.samplers.KSampler.SAMPLERS,),
                "scheduler": (comfy.samplers.KSampler.SCHEDULERS, {"default": "karras"}),
                "width": ("INT", {"default": 512, "min": 16, "max": nodes.MAX_RESOLUTION}),
            },
            "optional": {"note": ("STRING", {"multiline": True, "default": ""})},
        }

    def pick(self, sampler_name, scheduler, width, note=""):
        return (f"{sampler_name}/{scheduler}/{width}/{note}",)


class ShapesLLMLoader:
    CATEGORY = "airlock shapes"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "load"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": (folder_paths.get_filename_list("llm"),)}}

    def load(self, model):
        return (folder_paths.get_full_path_or_raise("llm", model),)


class ShapesNoise:
    CATEGORY = "airlock shapes"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "noise"

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "seed": ("INT", {"default": 0, "min": 0, "max": 0xFFFFFFFF}),
                "size": ("INT", {"default": 32, "min": 8, "max": 256}),
            }
        }

    def noise(self, seed, size):
        g = torch.Generator().manual_seed(seed)
        image = torch.rand((1, size, size, 3), generator=g)
        # A builtin extra's helper, as blur/sharpen packs use it.
        kernel = comfy_extras.nodes_post_processing.gaussian_kernel(5, 1.5)
        blurred = torch.nn.functional.conv2d(
            image.permute(0, 3, 1, 2).reshape(3, 1, size, size),
            kernel[None, None],
            padding=2,
        )
        return (blurred.reshape(1, 3, size, size).permute(0, 2, 3, 1).contiguous(),)


class ShapesDigest:
    """Output node: the SHA-256 of an IMAGE's bytes, so two runs compare bit for bit."""

    CATEGORY = "airlock shapes"
    RETURN_TYPES = ()
    FUNCTION = "digest"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",)}}

    def digest(self, image):
        data = image.detach().cpu().contiguous().numpy().tobytes()
        return {"ui": {"text": [hashlib.sha256(data).hexdigest(), str(tuple(image.shape))]}}


class ShapesProgram:
    """Output node: what the pack sees of the program it runs in."""

    CATEGORY = "airlock shapes"
    RETURN_TYPES = ()
    FUNCTION = "report"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"summary": ("STRING", {"forceInput": True})}}

    def report(self, summary):
        facts = {
            "summary": summary,
            "comfy_dir_is_comfyui": os.path.dirname(folder_paths.__file__) == COMFY_DIR,
            "argv0": os.path.basename(sys.argv[0]),
            "cpu_flag": "--cpu" in sys.argv,
            "main_is_script": getattr(__main__, "__spec__", None) is None,
            "builtin_extras_loaded": "LatentAdd" in nodes.NODE_CLASS_MAPPINGS,
            "latent_add": LatentAdd.__name__,
            "merge_base": MergeBase.__name__,
            "llm_dirs": [os.path.basename(d) for d in LLM_DIRS],
            "python_module": type(self).RELATIVE_PYTHON_MODULE,
            # At run time ComfyUI's mappings hold the pack's own nodes too.
            "own_node_in_comfy": nodes.NODE_CLASS_MAPPINGS.get("ShapesNoise") is ShapesNoise,
        }
        return {"ui": {"text": [json.dumps(facts, sort_keys=True)]}}


class ShapesOwnServer:
    """Reaches ComfyUI's own HTTP API at the address its flags give, as comfy_mtb's
    "Get Batch From History" fetches ``http://{args.listen}:{args.port}/history``."""

    CATEGORY = "airlock shapes"
    RETURN_TYPES = ()
    FUNCTION = "ask"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"route": ("STRING", {"default": "/system_stats"})}}

    def ask(self, route):
        import urllib.request

        from comfy.cli_args import args

        host = "127.0.0.1" if args.listen in ("0.0.0.0", "::") else args.listen.split(",")[0]
        scheme = "https" if args.tls_keyfile and args.tls_certfile else "http"
        try:
            with urllib.request.urlopen(f"{scheme}://{host}:{args.port}{route}", timeout=10) as r:
                stats = json.loads(r.read())
            answer = f"reached: comfyui {stats['system']['comfyui_version']}"
        except Exception as e:
            answer = f"not reached: {type(e).__name__}"
        return {"ui": {"text": [answer]}}


class ShapesAlwaysRun:
    """``IS_CHANGED = True``, a bool: ComfyUI calls it, warns, and re-runs the node every time."""

    CATEGORY = "airlock shapes"
    RETURN_TYPES = ()
    FUNCTION = "count"
    OUTPUT_NODE = True
    IS_CHANGED = True
    runs = 0

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"label": ("STRING", {"default": "x"})}}

    def count(self, label):
        type(self).runs += 1
        return {"ui": {"text": [f"{label}:{type(self).runs}"]}}


class ShapesMergeBlocks(MergeBase):
    """A subclass of a builtin extra node, as model-merging packs have."""

    CATEGORY = "airlock shapes"


class ShapesBroken:
    """INPUT_TYPES raises: ComfyUI leaves it out of /object_info; its pack still loads."""

    CATEGORY = "airlock shapes"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        raise RuntimeError("needs a model list that is not there")


class AnyType(str):
    """Matches any type in ComfyUI's validation (``not a != b``), whatever its name."""

    def __ne__(self, other):
        return False


class FlexibleOptional(dict):
    """Contains every key: ComfyUI passes the node any input the frontend added."""

    def __init__(self, kind, data=None):
        self.kind = kind
        self.data = data or {}
        for k, v in self.data.items():
            self[k] = v

    def __getitem__(self, key):
        return self.data.get(key, (self.kind,))

    def __contains__(self, key):
        return True


ANY = AnyType("*")


class ShapesAnySwitch:
    """A switch over a dynamic number of inputs ("any_01", "any_02", ... and widget values the
    frontend adds), and an input of an "any" type with a name of its own."""

    CATEGORY = "airlock shapes"
    RETURN_TYPES = (ANY, "STRING")
    FUNCTION = "switch"

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "select": ("INT", {"default": 1, "min": 1, "max": 9}),
                "label": (AnyType("Connect anything"),),
            },
            "optional": FlexibleOptional(ANY, {"any_01": (ANY,)}),
        }

    def switch(self, select, label, **kwargs):
        seen = {k: v if not hasattr(v, "shape") else list(v.shape) for k, v in kwargs.items()}
        return (kwargs.get(f"any_{select:02d}"), json.dumps([label, seen], sort_keys=True))


class ShapesGate:
    """A switch: a closed gate blocks its branch with ComfyUI's ExecutionBlocker."""

    CATEGORY = "airlock shapes"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "gate"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"text": ("STRING", {"default": "through"}), "open": ("BOOLEAN", {})}}

    def gate(self, text, open):
        return (text if open else ExecutionBlocker(None),)


class ShapesV3Range(io.ComfyNode):
    """A V3 node in a V1 pack's NODE_CLASS_MAPPINGS (a logic pack's way): ComfyUI describes it
    by its schema and runs its classmethod ``execute``, whose ``io.NodeOutput`` it unpacks."""

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="ShapesV3Range",
            category="airlock shapes",
            inputs=[
                io.Int.Input("start", default=2, min=-100, max=100),
                io.Int.Input("stop", default=9, min=-100, max=100),
            ],
            outputs=[io.Int.Output("values", is_output_list=True), io.Int.Output("count")],
        )

    @classmethod
    def execute(cls, start, stop):
        values = list(range(start, stop, 3))
        return io.NodeOutput(values, len(values), ui={"text": [f"{start}..{stop}"]})


NODE_CLASS_MAPPINGS = {
    "ShapesSampler": ShapesSampler,
    "ShapesLLMLoader": ShapesLLMLoader,
    "ShapesNoise": ShapesNoise,
    "ShapesDigest": ShapesDigest,
    "ShapesProgram": ShapesProgram,
    "ShapesOwnServer": ShapesOwnServer,
    "ShapesAlwaysRun": ShapesAlwaysRun,
    "ShapesMergeBlocks": ShapesMergeBlocks,
    "ShapesBroken": ShapesBroken,
    "ShapesV3Range": ShapesV3Range,
    "ShapesGate": ShapesGate,
    "ShapesAnySwitch": ShapesAnySwitch,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "ShapesSampler": "Shapes Sampler (comfy.samplers at import)",
    "ShapesGone": "a display name for a class that is not there",
}

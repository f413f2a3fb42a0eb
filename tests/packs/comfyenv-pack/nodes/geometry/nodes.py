"""Nodes that need their env: a conda program and data file, a conda Python package, a PyPI
package and a prebuilt CUDA wheel; and a custom socket type."""

import os
import subprocess
import sys

from ...serialization import Meshlet


class MakeMeshlet:
    CATEGORY = "comfyenv-pack"
    RETURN_TYPES = ("MESHLET",)
    FUNCTION = "make"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"count": ("INT", {"default": 3, "min": 1, "max": 100})}}

    def make(self, count):
        return (Meshlet([(i, i * i) for i in range(count)]),)


class GeometryReport:
    CATEGORY = "comfyenv-pack"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "report"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"meshlet": ("MESHLET",)}}

    def report(self, meshlet):
        import six
        import tinycuda
        import tinygeom_py

        prefix = os.environ["CONDA_PREFIX"]
        with open(os.path.join(prefix, "share", "tinygeom", "shape.txt")) as f:
            shape = f.read().strip()
        tool = subprocess.run(["tinygeom"], capture_output=True, text=True, check=True)
        facts = {
            "points": len(meshlet.points),
            "last": list(meshlet.points[-1]),
            "shape": shape,
            "tool": tool.stdout.strip(),
            "conda_python_pkg": tinygeom_py.VALUE,
            "cuda_wheel": tinycuda.TAG,
            "six": six.__version__,
            "mode": os.environ.get("TINYGEOM_MODE"),
            "prefix": sys.prefix,
        }
        text = repr(sorted(facts.items()))
        return {"ui": {"text": [text]}, "result": (text,)}


NODE_CLASS_MAPPINGS = {"MakeMeshlet": MakeMeshlet, "GeometryReport": GeometryReport}
NODE_DISPLAY_NAME_MAPPINGS = {"GeometryReport": "Geometry report (conda env)"}

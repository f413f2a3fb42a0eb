"""The corpus runner's own custom node pack, loaded natively (in ``custom_nodes/``) by both
servers of a pair, native and isolated, so that what it measures is the same code on both
sides.

- Sources (``CorpusImage``, ``CorpusMask``, ``CorpusLatent``, ``CorpusAudio``, ``CorpusAny``):
  fixed, deterministic inputs for the node under test.
- ``CorpusDigest``: an output node taking any value (``INPUT_IS_LIST``, so a list output arrives
  whole) and showing a canonical digest of it as its UI output: tensors and arrays by dtype,
  shape and sha256 of their bytes; dicts, lists and plain values as they are; any other object
  (a pack's own class, a named tuple, a model) by its class name and its ``repr`` when its
  class has one, addresses blanked: what ComfyUI holds of an isolated pack's object is a
  reference to it in its worker (ADR 0023) carrying just these two. ComfyUI keeps UI outputs
  in /history, so the runner compares a node's return values across servers through it.
- ``GET /corpus-probe/routes``: every route of ComfyUI's aiohttp app (method, path), so the
  runner can tell a pack's routes from ComfyUI's own.
- ``GET /corpus-probe/born``: how many tensors of at least 256 KiB ``CorpusDigest`` was given
  (``large``), and for each isolated pack's running worker its counters of outputs born in
  shared memory (``_native.born_stats``, ADR 0044: ``sent`` of them crossed without a copy);
  ``{}`` of workers on the native server.

``CORPUS_PROBE_SIZE`` (default 64) sets the sources' image and mask side: at 64 an IMAGE is
48 KiB, below the size from which a worker's outputs are born (256 KiB); the runner's
``--probe-size 256`` makes it 768 KiB.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re

import torch
from aiohttp import web
from server import PromptServer

_MAX_DEPTH = 6
_MAX_ITEMS = 64
SIZE = int(os.environ.get("CORPUS_PROBE_SIZE") or 64)
#: The smallest block a worker's outputs are born in (comfy_airlock.born_policy.MIN_BYTES).
LARGE = 256 << 10
_LARGE_SEEN = [0]


def _tensor(t: torch.Tensor) -> dict:
    flat = t.detach().cpu().contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return {
        "tensor": str(t.dtype),
        "shape": list(t.shape),
        "sha256": hashlib.sha256(raw).hexdigest(),
    }


def _float(x: float):
    return x if math.isfinite(x) else repr(x)


_ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")


def _object(value) -> dict:
    """A pack's object: class name and repr (the rule of comfy_airlock.pack_values.text_of,
    which an isolated pack's reference carries)."""
    if hasattr(type(value), "airlock_type"):  # the reference ComfyUI holds for an isolated pack
        name, text = value.airlock_type.rsplit(".", 1)[-1], str(value)
    else:
        t = type(value)
        name, text = t.__name__, f"<{t.__qualname__} object>"
        if t.__repr__ is not object.__repr__:
            with contextlib.suppress(Exception):
                text = repr(value)
            text = text if len(text) <= 4096 else text[:4093] + "..."
    return {"object": name, "repr": _ADDRESS.sub("0x?", text)}


def digest(value, depth: int = 0):
    """A JSON-able, address-free stand-in for ``value``: equal digests, equal values."""
    if depth > _MAX_DEPTH:
        return {"deep": type(value).__qualname__}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return _object(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, torch.Tensor):
        if value.nbytes >= LARGE:
            _LARGE_SEEN[0] += 1
        return _tensor(value)
    mod = type(value).__module__
    if mod == "numpy" and hasattr(value, "tobytes") and hasattr(value, "dtype"):
        return {
            "ndarray": str(value.dtype),
            "shape": list(getattr(value, "shape", ())),
            "sha256": hashlib.sha256(value.tobytes()).hexdigest(),
        }
    if isinstance(value, dict):
        items = list(value.items())[:_MAX_ITEMS]
        return {"dict": {str(k): digest(v, depth + 1) for k, v in items}, "len": len(value)}
    if isinstance(value, (list, tuple)):
        head = [digest(v, depth + 1) for v in value[:_MAX_ITEMS]]
        return {type(value).__name__: head, "len": len(value)}
    if isinstance(value, bytes):
        return {"bytes": hashlib.sha256(value).hexdigest(), "len": len(value)}
    if mod.startswith("PIL.") and hasattr(value, "tobytes"):
        return {
            "pil": value.mode,
            "size": list(value.size),
            "sha256": hashlib.sha256(value.tobytes()).hexdigest(),
        }
    return _object(value)


class CorpusDigest:
    CATEGORY = "corpus-probe"
    OUTPUT_NODE = True
    INPUT_IS_LIST = True
    RETURN_TYPES = ()
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("*", {})}}

    @classmethod
    def VALIDATE_INPUTS(cls, input_types):
        return True

    def run(self, value):
        text = json.dumps(digest(value), sort_keys=True)
        return {"ui": {"corpus_digest": [text]}}


def _ramp(*shape: int) -> torch.Tensor:
    n = math.prod(shape)
    return (torch.arange(n, dtype=torch.float32) % 251 / 250.0).reshape(shape)


class _Source:
    CATEGORY = "corpus-probe"
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}


class CorpusImage(_Source):
    RETURN_TYPES = ("IMAGE",)

    def run(self):
        return (_ramp(1, SIZE, SIZE, 3),)


class CorpusMask(_Source):
    RETURN_TYPES = ("MASK",)

    def run(self):
        return (_ramp(1, SIZE, SIZE),)


class CorpusLatent(_Source):
    RETURN_TYPES = ("LATENT",)

    def run(self):
        return ({"samples": _ramp(1, 4, SIZE // 8, SIZE // 8)},)


class CorpusAudio(_Source):
    RETURN_TYPES = ("AUDIO",)

    def run(self):
        return ({"waveform": _ramp(1, 1, 4000) - 0.5, "sample_rate": 8000},)


class CorpusAny(_Source):
    # What a generic "*" input gets: a small int works for most "any" inputs (display, switch,
    # pass-through, math nodes).
    RETURN_TYPES = ("*",)

    def run(self):
        return (7,)


NODE_CLASS_MAPPINGS = {
    "CorpusDigest": CorpusDigest,
    "CorpusImage": CorpusImage,
    "CorpusMask": CorpusMask,
    "CorpusLatent": CorpusLatent,
    "CorpusAudio": CorpusAudio,
    "CorpusAny": CorpusAny,
}


@PromptServer.instance.routes.get("/corpus-probe/routes")
async def _routes(request):
    out = []
    for route in request.app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter") or info.get("prefix") or ""
        entry = {"method": route.method, "path": path}
        if "directory" in info:  # a static directory: the runner asks for files in it
            entry["directory"] = str(info["directory"])
        out.append(entry)
    return web.json_response(out)


@PromptServer.instance.routes.get("/corpus-probe/born")
async def _born(request):
    workers = {}
    try:
        from comfy_airlock.host import loader
    except ImportError:  # the native server has no comfy-airlock
        packs = {}
    else:
        packs = dict(loader._PACKS)  # the runner's question, between prompts
    for name, pack in packs.items():
        try:
            workers[name] = pack.ask("comfy_airlock._native:born_stats")
        except Exception as e:  # no worker running: nothing to count
            workers[name] = {"error": f"{type(e).__name__}: {e}"}
    return web.json_response({"large": _LARGE_SEEN[0], "workers": workers})

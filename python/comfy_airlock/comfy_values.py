"""Codecs for ComfyUI's own value types that nodes return (host and worker).

- ``ExecutionBlocker``, which a switch node returns to stop a branch.
- ComfyUI's VIDEO values (``comfy_api``'s ``VideoFromComponents`` and ``VideoFromFile``): a
  pack's node makes one for ComfyUI's own Save Video or Get Video Components, and ComfyUI's
  Load Video or Create Video makes one for a pack's node. They cross as what they are made
  of (the frames as a tensor, the audio, the frame rate; or the file's path or bytes) and are
  made again on the other side with ComfyUI's own class. Their module imports PyAV, so their
  codecs are registered only when a video is first sent or received
  (:func:`comfy_airlock.values.register_late_codec`).
- ComfyUI's 3D and vector values (``comfy_api``'s ``MESH``, ``VOXEL``, ``SPLAT``, ``File3D``
  and ``SVG``): what 3D packs make for ComfyUI's Save GLB, Save SVG and splat nodes, and what
  those nodes make for a pack. ``MESH``, ``VOXEL`` and ``SPLAT`` are records of tensors whose
  fields grow from one ComfyUI to the next: they cross as every attribute the instance has
  (both sides run the same ComfyUI source) and are made again without their ``__init__``; one
  with an attribute nothing can send stays in the pack's worker, as before. ``File3D`` crosses
  as its path or its bytes and its format, ``SVG`` as the bytes of each document (ADR 0063).
- CLIP vision outputs (``comfy.clip_vision.Output``, CLIP_VISION_OUTPUT), which ComfyUI's
  CLIP Vision Encode makes for video and style packs and which ComfyUI's conditioning nodes
  put inside CONDITIONING: a record of tensors, like ``MESH`` (ADR 0063).
- Curves and ranges (``comfy_api``'s ``MonotoneCubicCurve``, ``LinearCurve``, ``RangeInput``):
  what ComfyUI's Curve Editor makes for a pack's colour node, records of points and arrays.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from fractions import Fraction
from typing import Any

VIDEO_MODULE = "comfy_api.latest._input_impl.video_types"
FROM_COMPONENTS = "comfy.VideoFromComponents"
FROM_FILE = "comfy.VideoFromFile"

GEOMETRY_MODULE = "comfy_api.latest._util.geometry_types"
IMAGE_MODULE = "comfy_api.latest._util.image_types"
FILE_3D = "comfy.File3D"
SVG = "comfy.SVG"
# ComfyUI's records (plain objects of tensors, arrays and numbers) that cross as their
# attributes: module -> {class: codec name}. One late registration per module, so a mesh
# does not import ComfyUI's model code, nor a CLIP vision output PyAV.
RECORDS = {
    GEOMETRY_MODULE: {"MESH": "comfy.MESH", "VOXEL": "comfy.VOXEL", "SPLAT": "comfy.SPLAT"},
    "comfy.clip_vision": {"Output": "comfy.ClipVisionOutput"},
    "comfy_api.latest._input.curve_types": {
        "MonotoneCubicCurve": "comfy.MonotoneCubicCurve",
        "LinearCurve": "comfy.LinearCurve",
    },
    "comfy_api.latest._input.range_types": {"RangeInput": "comfy.RangeInput"},
}
# How deep an attribute's containers are looked into for something that cannot cross.
_FIELD_DEPTH = 8


def register_comfy_codecs() -> None:
    """Registers the codecs on this side (a codec must be registered where the value is sent
    and where it is received)."""
    from comfy_airlock.values import register_codec, register_late_codec

    register_late_codec(
        (FROM_COMPONENTS, FROM_FILE),
        ((VIDEO_MODULE, "VideoFromComponents"), (VIDEO_MODULE, "VideoFromFile")),
        _register_video,
    )
    register_late_codec(
        (FILE_3D, SVG),
        ((GEOMETRY_MODULE, "File3D"), (IMAGE_MODULE, "SVG")),
        _register_3d_files,
    )
    for module, classes in RECORDS.items():
        register_late_codec(
            tuple(classes.values()),
            tuple((module, name) for name in classes),
            _records_of(module, classes),
        )
    try:
        from comfy_execution.graph_utils import ExecutionBlocker
    except Exception:
        return
    register_codec(
        "comfy.ExecutionBlocker", ExecutionBlocker, lambda b: b.message, ExecutionBlocker
    )


def _register_video() -> None:
    try:
        from comfy_api.latest._input_impl import video_types
        from comfy_api.latest._util import VideoComponents
    except Exception as e:
        raise TypeError(
            f"a ComfyUI VIDEO value cannot be made here: ComfyUI's video types do not import "
            f"({type(e).__name__}: {e}); the environment needs ComfyUI's `av` (PyAV)"
        ) from e
    from comfy_airlock.values import register_codec

    def components_of(video: Any) -> dict[str, Any]:
        # The whole record where the object keeps it (metadata and alpha too: its public
        # get_components() leaves them out), else what get_components() gives.
        c = getattr(video, "_VideoFromComponents__components", None) or video.get_components()
        rate = Fraction(c.frame_rate)
        return {
            "images": c.images,
            "audio": c.audio,
            "frame_rate": (rate.numerator, rate.denominator),
            "metadata": getattr(c, "metadata", None),
            "alpha": getattr(c, "alpha", None),
            "bit_depth": video.get_bit_depth(),
        }

    def from_components(d: dict[str, Any]) -> Any:
        extra = {k: d[k] for k in ("metadata", "alpha") if d.get(k) is not None}
        components = VideoComponents(
            images=d["images"], audio=d["audio"], frame_rate=Fraction(*d["frame_rate"]), **extra
        )
        return video_types.VideoFromComponents(components, bit_depth=d["bit_depth"])

    def file_of(video: Any) -> dict[str, Any]:
        source = video.get_stream_source()
        return {
            "file": source.getvalue() if isinstance(source, io.BytesIO) else str(source),
            "start_time": float(getattr(video, "_VideoFromFile__start_time", 0) or 0),
            "duration": float(getattr(video, "_VideoFromFile__duration", 0) or 0),
        }

    def from_file(d: dict[str, Any]) -> Any:
        file = d["file"]
        return video_types.VideoFromFile(
            io.BytesIO(file) if isinstance(file, bytes) else file,
            start_time=d["start_time"],
            duration=d["duration"],
        )

    register_codec(FROM_COMPONENTS, video_types.VideoFromComponents, components_of, from_components)
    register_codec(FROM_FILE, video_types.VideoFromFile, file_of, from_file)


def _register_3d_files() -> None:
    try:
        from comfy_api.latest._util import geometry_types, image_types
    except Exception as e:
        raise TypeError(
            f"a ComfyUI File3D or SVG value cannot be made here: ComfyUI's `comfy_api` types do not "
            f"import ({type(e).__name__}: {e}); the environment needs ComfyUI's requirements"
        ) from e
    from comfy_airlock.values import register_codec

    def file_of(f: Any) -> dict[str, Any]:
        source = f.get_source()
        return {"source": source if isinstance(source, str) else f.get_bytes(), "format": f.format}

    def from_file(d: dict[str, Any]) -> Any:
        source = d["source"]
        return geometry_types.File3D(
            source if isinstance(source, str) else io.BytesIO(source), file_format=d["format"]
        )

    register_codec(FILE_3D, geometry_types.File3D, file_of, from_file)

    def svg_of(svg: Any) -> list[bytes]:
        return [_bytes_of(doc) for doc in svg.data]

    register_codec(
        SVG, image_types.SVG, svg_of, lambda docs: image_types.SVG([io.BytesIO(d) for d in docs])
    )


def _records_of(module: str, classes: dict[str, str]) -> Callable[[], None]:
    def register() -> None:
        import importlib

        from comfy_airlock.values import register_codec

        try:
            found = importlib.import_module(module)
        except Exception as e:
            raise TypeError(
                f"a ComfyUI {'/'.join(classes)} value cannot be made here: `{module}` does not "
                f"import ({type(e).__name__}: {e}); the environment needs ComfyUI's requirements"
            ) from e
        for name, codec in classes.items():
            cls = getattr(found, name, None)
            if cls is not None:  # SPLAT is newer than MESH and VOXEL
                register_codec(codec, cls, _fields_of, _remake(cls), fits=_fields_cross)

    return register


def _fields_of(record: Any) -> dict[str, Any]:
    return dict(vars(record))


def _remake(cls: type) -> Any:
    def remake(fields: dict[str, Any]) -> Any:
        # Not through __init__: its parameters differ between ComfyUI versions, the attributes
        # are what the instance was.
        record = cls.__new__(cls)
        vars(record).update(fields)
        return record

    return remake


def _fields_cross(record: Any) -> bool:
    from comfy_airlock.values import crosses

    def ok(value: Any, depth: int) -> bool:
        # A named tuple would arrive as a plain one, without its fields.
        if not crosses(value) or (isinstance(value, tuple) and hasattr(value, "_fields")):
            return False
        if isinstance(value, (list, tuple)) and depth < _FIELD_DEPTH:
            return all(ok(v, depth + 1) for v in value)
        if isinstance(value, dict) and depth < _FIELD_DEPTH:
            return all(ok(k, depth + 1) and ok(v, depth + 1) for k, v in value.items())
        return True

    try:
        fields = vars(record)
    except TypeError:  # a class with __slots__ (not ComfyUI's today): it stays where it is
        return False
    return all(ok(v, 0) for v in fields.values())


def _bytes_of(doc: Any) -> bytes:
    if isinstance(doc, io.BytesIO):
        return doc.getvalue()
    if hasattr(doc, "read"):
        if hasattr(doc, "seek"):
            doc.seek(0)
        return doc.read()
    return bytes(doc)

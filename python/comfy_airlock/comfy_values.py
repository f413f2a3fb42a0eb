"""Codecs for ComfyUI's own value types that nodes return (host and worker).

- ``ExecutionBlocker``, which a switch node returns to stop a branch.
- ComfyUI's VIDEO values (``comfy_api``'s ``VideoFromComponents`` and ``VideoFromFile``): a
  pack's node makes one for ComfyUI's own Save Video or Get Video Components, and ComfyUI's
  Load Video or Create Video makes one for a pack's node. They cross as what they are made
  of (the frames as a tensor, the audio, the frame rate; or the file's path or bytes) and are
  made again on the other side with ComfyUI's own class. Their module imports PyAV, so their
  codecs are registered only when a video is first sent or received
  (:func:`comfy_airlock.values.register_late_codec`).
"""

from __future__ import annotations

import io
from fractions import Fraction
from typing import Any

VIDEO_MODULE = "comfy_api.latest._input_impl.video_types"
FROM_COMPONENTS = "comfy.VideoFromComponents"
FROM_FILE = "comfy.VideoFromFile"


def register_comfy_codecs() -> None:
    """Registers the codecs on this side (a codec must be registered where the value is sent
    and where it is received)."""
    from comfy_airlock.values import register_codec, register_late_codec

    register_late_codec(
        (FROM_COMPONENTS, FROM_FILE),
        ((VIDEO_MODULE, "VideoFromComponents"), (VIDEO_MODULE, "VideoFromFile")),
        _register_video,
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

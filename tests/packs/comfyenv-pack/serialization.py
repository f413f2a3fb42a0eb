"""The MESHLET socket's wire format ([types] MESHLET = "custom" in comfy-env-root.toml).
Loaded by file path on both sides, so stdlib only at the top level."""

from comfy_env import register_serializer


class Meshlet:
    def __init__(self, points):
        self.points = [tuple(p) for p in points]


register_serializer(
    "Meshlet",
    serialize=lambda m, recurse: {"points": [list(p) for p in m.points]},
    deserialize=lambda payload, recurse: Meshlet(payload["points"]),
)

"""Test pack: V3 nodes, with the schema fields whose /object_info form differs between a V3
class and a V1 one (deprecated/experimental false, tooltips, no search aliases, hidden
inputs), an override of each optional method, nodes whose outputs compare bit for bit, and
dynamic inputs (Autogrow, nested DynamicCombo) as ComfyUI's own V3 nodes declare them."""

import hashlib

import torch
from comfy_api.latest import ComfyExtension, io, ui
from nodes import NODE_CLASS_MAPPINGS as ALL_NODE_CLASS_MAPPINGS


class V3Repeat(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="ShapesV3Repeat",
            display_name="Shapes V3 Repeat",
            category="airlock shapes/v3",
            description="Repeats its text; says which node it is.",
            inputs=[
                io.String.Input("text", default="ab", tooltip="what to repeat"),
                io.Int.Input(
                    "times", default=2, min=1, max=8, display_mode=io.NumberDisplay.slider
                ),
                io.Combo.Input("sep", options=["-", "+", " "], default="-"),
            ],
            outputs=[io.String.Output(display_name="repeated", tooltip="text, times over")],
            hidden=[io.Hidden.unique_id, io.Hidden.dynprompt],
        )

    @classmethod
    def validate_inputs(cls, times):
        return True if times != 7 else "7 is refused"

    @classmethod
    def execute(cls, text, times, sep):
        uid, dynprompt = cls.hidden.unique_id, cls.hidden.dynprompt
        node = dynprompt.get_node(uid)["class_type"]  # DYNPROMPT's read API, as natively
        return io.NodeOutput(sep.join([text] * times) + f"@{uid}:{node}")


class V3Noise(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="ShapesV3Noise",
            category="airlock shapes/v3",
            search_aliases=["random image"],
            inputs=[io.Int.Input("seed", default=3, min=0, max=1000)],
            outputs=[io.Image.Output(), io.Int.Output(display_name="seed")],
        )

    @classmethod
    def fingerprint_inputs(cls, seed):
        return seed

    @classmethod
    def execute(cls, seed):
        g = torch.Generator().manual_seed(seed)
        return io.NodeOutput(torch.rand((1, 16, 16, 3), generator=g), seed)


class V3Digest(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="ShapesV3Digest",
            display_name="Shapes V3 Digest",
            category="airlock shapes/v3",
            is_output_node=True,
            is_experimental=True,
            inputs=[
                io.Image.Input("image"),
                io.String.Input("label", default="", optional=True, lazy=True),
            ],
            outputs=[],
        )

    @classmethod
    def check_lazy_status(cls, image, label=None):
        return ["label"] if label is None else []

    @classmethod
    def execute(cls, image, label=""):
        data = image.detach().cpu().contiguous().numpy().tobytes()
        return io.NodeOutput(ui={"text": [label, hashlib.sha256(data).hexdigest()]})


class V3Old(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="ShapesV3Old",
            display_name="Shapes V3 Old",
            category="airlock shapes/v3",
            is_deprecated=True,
            inputs=[io.Float.Input("x", default=1.5, step=0.5)],
            outputs=[io.Float.Output()],
        )

    @classmethod
    def execute(cls, x):
        return io.NodeOutput(x * 2)


class V3Prompt(io.ComfyNode):
    """An ordinary input named like a hidden one (``prompt``), next to hidden inputs, that one
    among them, as Easy-Use's ``promptLine`` has it."""

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="ShapesV3Prompt",
            category="airlock shapes/v3",
            inputs=[io.String.Input("prompt", multiline=True, default="a cat")],
            outputs=[io.String.Output()],
            hidden=[io.Hidden.unique_id, io.Hidden.prompt],
        )

    @classmethod
    def execute(cls, prompt):
        nodes = ",".join(sorted(cls.hidden.prompt))  # the prompt's node ids, as natively
        return io.NodeOutput(f"{prompt}@{cls.hidden.unique_id}[{nodes}]")


class V3ClassOf(io.ComfyNode):
    """Reads the class of the node that feeds it in ComfyUI's NODE_CLASS_MAPPINGS, bound at
    import, as Easy-Use's ``indexAnything`` reads another pack's node's ``OUTPUT_IS_LIST``
    (through hidden PROMPT and UNIQUE_ID, lists under ``is_input_list``)."""

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="ShapesV3ClassOf",
            category="airlock shapes/v3",
            is_input_list=True,
            inputs=[io.AnyType.Input("any")],
            outputs=[io.String.Output()],
            hidden=[io.Hidden.prompt, io.Hidden.unique_id],
        )

    @classmethod
    def execute(cls, any):
        prompt, uid = cls.hidden.prompt, cls.hidden.unique_id
        prompt = prompt[0] if isinstance(prompt, list) else prompt
        uid = uid[0] if isinstance(uid, list) else uid
        source, slot = prompt[uid]["inputs"]["any"]
        class_type = prompt[source]["class_type"]
        node = ALL_NODE_CLASS_MAPPINGS[class_type]
        required = sorted(node.INPUT_TYPES().get("required") or {})
        return io.NodeOutput(
            f"{class_type}[{slot}] list={list(node.OUTPUT_IS_LIST)[slot]} "
            f"types={list(node.RETURN_TYPES)} output_node={bool(node.OUTPUT_NODE)} "
            f"required={required} in={class_type in ALL_NODE_CLASS_MAPPINGS} "
            f"unknown={'NoSuchNode' in ALL_NODE_CLASS_MAPPINGS} "
            f"get={ALL_NODE_CLASS_MAPPINGS.get('NoSuchNode', 'none')} values={len(any)}"
        )


class V3Join(io.ComfyNode):
    """A growing list of inputs (``io.Autogrow``, as ComfyUI's own And/Or nodes): the prompt
    names them ``parts.part0``, ``parts.part1``...; the node gets them as one dict. Lazy: its
    ``check_lazy_status`` gets each as ``(value, "parts.partN")`` and asks for those by name."""

    @classmethod
    def define_schema(cls):
        part = io.String.Input("part", lazy=True)
        template = io.Autogrow.TemplatePrefix(input=part, prefix="part", min=1)
        return io.Schema(
            node_id="ShapesV3Join",
            category="airlock shapes/v3",
            inputs=[
                io.Autogrow.Input("parts", template=template),
                io.String.Input("sep", default="/"),
            ],
            outputs=[io.String.Output()],
        )

    @classmethod
    def check_lazy_status(cls, parts, sep):
        return [key for value, key in parts.values() if value is None]

    @classmethod
    def execute(cls, parts: io.Autogrow.Type, sep: str) -> io.NodeOutput:
        return io.NodeOutput(sep.join(f"{k}={v}" for k, v in parts.items()))


class V3Pick(io.ComfyNode):
    """Inputs that depend on a combo's choice (``io.DynamicCombo``, nested once), a tensor
    among them: the prompt names them ``mode.text``, ``mode.image``, ``mode.how.factor``."""

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="ShapesV3Pick",
            category="airlock shapes/v3",
            inputs=[
                io.DynamicCombo.Input(
                    "mode",
                    options=[
                        io.DynamicCombo.Option("text", [io.String.Input("text")]),
                        io.DynamicCombo.Option(
                            "image",
                            [
                                io.Image.Input("image"),
                                io.DynamicCombo.Input(
                                    "how",
                                    options=[
                                        io.DynamicCombo.Option(
                                            "scale", [io.Float.Input("factor", default=2.0)]
                                        ),
                                        io.DynamicCombo.Option("invert", []),
                                    ],
                                ),
                            ],
                        ),
                    ],
                )
            ],
            outputs=[io.Image.Output(), io.String.Output()],
        )

    @classmethod
    def execute(cls, mode: dict) -> io.NodeOutput:
        if mode["mode"] == "text":
            return io.NodeOutput(torch.zeros((1, 4, 4, 3)), f"text:{mode['text']}")
        how = mode["how"]
        image = mode["image"] * how["factor"] if how["how"] == "scale" else 1.0 - mode["image"]
        keys = ",".join(sorted(mode)) + ";" + ",".join(sorted(how))
        return io.NodeOutput(image, f"image:{how['how']}:{keys}")


class V3Switch(io.ComfyNode):
    """Inputs and output of one type chosen by what is connected (``io.MatchType``), lazy: the
    shape of ComfyUI's own If/Else Switch."""

    @classmethod
    def define_schema(cls):
        template = io.MatchType.Template("switch")
        return io.Schema(
            node_id="ShapesV3Switch",
            category="airlock shapes/v3",
            inputs=[
                io.Boolean.Input("switch"),
                io.MatchType.Input("on_false", template=template, lazy=True),
                io.MatchType.Input("on_true", template=template, lazy=True),
            ],
            outputs=[io.MatchType.Output(template=template, display_name="output")],
        )

    @classmethod
    def check_lazy_status(cls, switch, on_false=None, on_true=None):
        if switch and on_true is None:
            return ["on_true"]
        if not switch and on_false is None:
            return ["on_false"]
        return []

    @classmethod
    def execute(cls, switch, on_true, on_false) -> io.NodeOutput:
        return io.NodeOutput(on_true if switch else on_false)


class V3Show(io.ComfyNode):
    """Shows its image and a text the V3 way (``ui.PreviewImage(image, cls=cls)``, as ComfyUI's
    own V3 nodes do: a PNG in ComfyUI's temp folder, with the prompt in its metadata)."""

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="ShapesV3Show",
            category="airlock shapes/v3",
            is_output_node=True,
            inputs=[io.Image.Input("image"), io.String.Input("note", default="n")],
            outputs=[],
            hidden=[io.Hidden.prompt, io.Hidden.extra_pnginfo],
        )

    @classmethod
    def execute(cls, image, note) -> io.NodeOutput:
        return io.NodeOutput(ui=ui.PreviewImage(image, cls=cls))


class V3Clip(io.ComfyNode):
    """Makes a VIDEO of its frames for ComfyUI's own video nodes, as video packs do: from the
    frames (``VideoFromComponents``) or as an encoded file in memory (``VideoFromFile``)."""

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="ShapesV3Clip",
            category="airlock shapes/v3",
            inputs=[
                io.Image.Input("images"),
                io.Float.Input("fps", default=8.0),
                io.Combo.Input("made", options=["frames", "file"]),
            ],
            outputs=[io.Video.Output()],
        )

    @classmethod
    def execute(cls, images, fps, made) -> io.NodeOutput:
        from fractions import Fraction
        from io import BytesIO

        from comfy_api.latest import InputImpl, Types

        rate = Fraction(fps).limit_denominator(1000)
        video = InputImpl.VideoFromComponents(
            Types.VideoComponents(images=images, frame_rate=rate, metadata={"by": "clip"})
        )
        if made == "file":
            buffer = BytesIO()
            video.save_to(buffer, format=Types.VideoContainer.MP4, codec=Types.VideoCodec.H264)
            video = InputImpl.VideoFromFile(buffer)
        return io.NodeOutput(video)


class V3Frames(io.ComfyNode):
    """Takes a VIDEO that ComfyUI's own nodes made apart: its frames and what it says of itself."""

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="ShapesV3Frames",
            category="airlock shapes/v3",
            inputs=[io.Video.Input("video")],
            outputs=[io.Image.Output(), io.String.Output()],
        )

    @classmethod
    def execute(cls, video) -> io.NodeOutput:
        c = video.get_components()
        about = (
            f"{type(video).__name__} {tuple(c.images.shape)} {c.frame_rate} {video.get_bit_depth()}"
        )
        return io.NodeOutput(c.images, about)


TETRA_OBJ = b"v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 2 3\nf 1 2 4\nf 1 3 4\nf 2 3 4\n"


class V3Make3D(io.ComfyNode):
    """Makes ComfyUI's 3D and vector values, as 3D packs do for ComfyUI's own Save GLB, Save
    SVG and splat nodes: a textured MESH (with an attribute of its own), a VOXEL grid, a
    gaussian SPLAT, an SVG, and OBJ files as File3D from bytes in memory and from a path."""

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="ShapesV3Make3D",
            category="airlock shapes/v3",
            inputs=[io.Int.Input("seed", default=0)],
            outputs=[
                io.Mesh.Output(),
                io.Voxel.Output(),
                io.Splat.Output(),
                io.SVG.Output(),
                io.File3DOBJ.Output(display_name="obj_bytes"),
                io.File3DOBJ.Output(display_name="obj_path"),
            ],
        )

    @classmethod
    def execute(cls, seed) -> io.NodeOutput:
        import os
        from io import BytesIO

        import folder_paths
        from comfy_api.latest import Types

        g = torch.Generator().manual_seed(seed)
        vertices = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]]])
        faces = torch.tensor([[[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]]])
        mesh = Types.MESH(
            vertices + torch.rand(1, 4, 3, generator=g) * 0.1,
            faces,
            uvs=torch.rand(1, 4, 2, generator=g),
            vertex_colors=torch.rand(1, 4, 4, generator=g),
            texture=torch.rand(1, 2, 2, 3, generator=g),
        )
        mesh.airlock_note = f"tetra {seed}"  # a field ComfyUI's class does not know
        grid = torch.rand(1, 8, 8, 8, generator=g) * 0.4
        grid[:, 2:6, 2:6, 2:6] += 0.5
        n = 16
        rotations = torch.rand(1, n, 4, generator=g) + 0.1
        splat = Types.SPLAT(
            positions=torch.rand(1, n, 3, generator=g),
            scales=torch.rand(1, n, 3, generator=g) * 0.1 + 0.01,
            rotations=rotations / rotations.norm(dim=-1, keepdim=True),
            opacities=torch.rand(1, n, 1, generator=g),
            sh=torch.rand(1, n, 1, 3, generator=g),
        )
        svg = io.SVG.Type(
            [
                BytesIO(
                    f'<svg xmlns="http://www.w3.org/2000/svg"><circle r="{seed}"/></svg>'.encode()
                )
            ]
        )
        path = os.path.join(folder_paths.get_temp_directory(), f"airlock-tetra-{seed}.obj")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(TETRA_OBJ)
        return io.NodeOutput(
            mesh,
            Types.VOXEL(grid),
            splat,
            svg,
            Types.File3D(BytesIO(TETRA_OBJ), file_format="obj"),
            Types.File3D(path),
        )


def _sig(x) -> str:
    """A tensor's dtype, shape and a digest of its bytes; a plain value's repr; any other
    object only as one (this pack cannot look inside ComfyUI's, such as a HookGroup)."""
    if isinstance(x, torch.Tensor):
        data = x.detach().cpu().contiguous().numpy().tobytes()
        return f"{str(x.dtype)[6:]}{tuple(x.shape)}:{hashlib.sha256(data).hexdigest()[:10]}"
    if x is None or isinstance(x, (bool, int, float, str, bytes, list, tuple, dict)):
        return repr(x)
    return "<object>"


def _about(value) -> str:
    """What a 3D or vector value (or a record of tensors) is made of, with digests."""
    if value is None:
        return "-"
    kind = type(value).__name__
    if kind == "File3D":
        digest = hashlib.sha256(value.get_bytes()).hexdigest()[:10]
        return f"File3D {value.format} disk={value.is_disk_backed} {digest}"
    if kind == "SVG":
        return "SVG " + ",".join(hashlib.sha256(d.getvalue()).hexdigest()[:10] for d in value.data)
    return kind + "(" + " ".join(f"{k}={_sig(v)}" for k, v in sorted(vars(value).items())) + ")"


class V3Read3D(io.ComfyNode):
    """Takes 3D and vector values ComfyUI's own nodes made (or this pack's) apart."""

    @classmethod
    def define_schema(cls):
        files = [io.File3DOBJ, io.File3DSplatAny, io.File3DPLY]
        return io.Schema(
            node_id="ShapesV3Read3D",
            category="airlock shapes/v3",
            inputs=[
                io.Mesh.Input("mesh", optional=True),
                io.Voxel.Input("voxel", optional=True),
                io.Splat.Input("splat", optional=True),
                io.SVG.Input("svg", optional=True),
                io.MultiType.Input(io.File3DAny.Input("file", optional=True), types=files),
            ],
            outputs=[io.String.Output()],
        )

    @classmethod
    def execute(cls, mesh=None, voxel=None, splat=None, svg=None, file=None) -> io.NodeOutput:
        return io.NodeOutput(" | ".join(_about(v) for v in (mesh, voxel, splat, svg, file)))


class V3Vision(io.ComfyNode):
    """Makes a CLIP_VISION_OUTPUT (ComfyUI's own record, as a pack's image encoder does for
    ComfyUI's conditioning nodes) and a CONDITIONING to put it in."""

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="ShapesV3Vision",
            category="airlock shapes/v3",
            inputs=[io.Int.Input("seed", default=0)],
            outputs=[io.ClipVisionOutput.Output(), io.Conditioning.Output()],
        )

    @classmethod
    def execute(cls, seed) -> io.NodeOutput:
        from comfy.clip_vision import Output

        g = torch.Generator().manual_seed(seed)
        out = Output()
        out["last_hidden_state"] = torch.rand(1, 5, 8, generator=g)
        out["image_embeds"] = torch.rand(1, 8, generator=g)
        out["penultimate_hidden_states"] = torch.rand(1, 5, 8, generator=g)
        out["image_sizes"] = [torch.Size([3, 4, 4])]
        out["mm_projected"] = None
        cond = [
            [torch.rand(1, 3, 8, generator=g), {"pooled_output": torch.rand(1, 8, generator=g)}]
        ]
        return io.NodeOutput(out, cond)


class V3ReadCond(io.ComfyNode):
    """Takes a CONDITIONING apart, CLIP vision outputs ComfyUI's nodes put in it too."""

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="ShapesV3ReadCond",
            category="airlock shapes/v3",
            inputs=[io.Conditioning.Input("conditioning")],
            outputs=[io.String.Output()],
        )

    @classmethod
    def execute(cls, conditioning) -> io.NodeOutput:
        parts = []
        for tensor, extra in conditioning:
            parts.append(_sig(tensor))
            for key in sorted(extra):
                value = extra[key]
                if key == "unclip_conditioning":
                    for entry in value:
                        v = entry["clip_vision_output"]
                        parts.append(f"{type(v).__module__}.{_about(v)}")
                        parts.append(f"{entry['strength']} {entry['noise_augmentation']}")
                else:
                    parts.append(f"{key}={_sig(value)}")
        return io.NodeOutput(" | ".join(parts))


class V3CondPass(io.ComfyNode):
    """Passes a CONDITIONING on, marked, as prompt-scheduling and combining nodes do, whatever
    ComfyUI's nodes put in it (hooks, a ControlNet)."""

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="ShapesV3CondPass",
            category="airlock shapes/v3",
            inputs=[io.Conditioning.Input("conditioning")],
            outputs=[io.Conditioning.Output(), io.String.Output()],
        )

    @classmethod
    def execute(cls, conditioning) -> io.NodeOutput:
        import copy

        out = [[t * 1, {**extra, "airlock_seen": True}] for t, extra in copy.deepcopy(conditioning)]
        keys = ",".join(f"{k}={_sig(v)}" for k, v in sorted(conditioning[0][1].items()))
        return io.NodeOutput(out, keys)


class V3Curve(io.ComfyNode):
    """Applies a CURVE that ComfyUI's Curve Editor made, as colour-grading nodes do: its
    lookup table, and what it says of itself."""

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="ShapesV3Curve",
            category="airlock shapes/v3",
            inputs=[io.Curve.Input("curve", socketless=False)],
            outputs=[io.String.Output()],
        )

    @classmethod
    def execute(cls, curve) -> io.NodeOutput:
        lut = ",".join(f"{v:.4f}" for v in curve.to_lut(5))
        return io.NodeOutput(f"{type(curve).__name__} {lut} {curve.points}")


class ShapesV3Extension(ComfyExtension):
    async def get_node_list(self):
        return [
            V3Repeat,
            V3Noise,
            V3Digest,
            V3Old,
            V3Prompt,
            V3ClassOf,
            V3Join,
            V3Pick,
            V3Switch,
            V3Show,
            V3Clip,
            V3Frames,
            V3Make3D,
            V3Read3D,
            V3Vision,
            V3ReadCond,
            V3CondPass,
            V3Curve,
        ]


async def comfy_entrypoint():
    return ShapesV3Extension()

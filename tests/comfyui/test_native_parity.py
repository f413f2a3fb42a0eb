"""Packs in the shape of popular public ones, loaded natively by one real ComfyUI and isolated
by another: the same nodes with the same /object_info, and the same outputs bit for bit
(tests/comfyui/native_oracle.py is the oracle).

- ``real-shapes-v1``: at import it needs what ComfyUI has done before any custom node
  (``comfy.samplers``, ``comfy_extras.nodes_model_merging`` reached as attributes, a cold
  ``from comfy_extras.nodes_latent import``, its prestartup script's ``llm`` folder,
  ``__main__.__file__``); odd nodes ComfyUI tolerates (``IS_CHANGED = True``, an
  ``INPUT_TYPES`` that raises, a display name without a class).
- ``real-shapes-v3``: V3 nodes whose /object_info a V1 proxy could not reproduce.
- ``pack-objects``: nodes that hand each other the pack's own objects and models (ADR 0023),
  isolated by ``airlock isolate`` from its requirements.txt as a user does it.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from pathlib import Path

import pytest

from .harness import ComfyUI, PromptRejected, execution_error
from .native_oracle import (
    assert_same_object_info,
    assert_same_outputs,
    isolate_by_command,
    module_of,
    start_pair,
)

# The fixture runs `airlock isolate` and starts two servers: past the default 300 s when the
# machine is loaded.
pytestmark = pytest.mark.timeout(900)

REPO = Path(__file__).resolve().parents[2]
TEST_PACKS = REPO / "tests" / "packs"
AIRLOCK_HOME = Path(os.environ.get("AIRLOCK_TEST_HOME") or REPO / ".cache" / "test-airlock-home")
PACKS = {
    "real-shapes-v1": TEST_PACKS / "real-shapes-v1",
    "real-shapes-v3": TEST_PACKS / "real-shapes-v3",
    "pack-objects": TEST_PACKS / "pack-objects",
}


def _models(base: Path) -> None:
    llm = base / "models" / "llm"
    llm.mkdir(parents=True, exist_ok=True)
    (llm / "tiny.gguf").write_bytes(b"GGUF")
    inputs = base / "input"
    inputs.mkdir(parents=True, exist_ok=True)
    (inputs / "airlock-clip.mp4").write_bytes(_clip())
    loras = base / "models" / "loras"
    loras.mkdir(parents=True, exist_ok=True)
    _tiny_lora(loras / "airlock-tiny.safetensors")


def _tiny_lora(path: Path) -> None:
    """A LoRA file for ComfyUI's Create Hook LoRA (its weights are only held, never applied)."""
    import torch
    from safetensors.torch import save_file

    up = torch.arange(8, dtype=torch.float32).reshape(4, 2)
    save_file(
        {"lora_unet_x.lora_up.weight": up, "lora_unet_x.lora_down.weight": up.T.contiguous()},
        str(path),
    )


_CLIP: list[bytes] = []


def _clip() -> bytes:
    """Four 16x16 frames as an MP4, made once (both servers' Load Video read the same bytes)."""
    if not _CLIP:
        import io

        import av
        import numpy as np

        buffer = io.BytesIO()
        with av.open(buffer, "w", format="mp4") as container:
            stream = container.add_stream("mpeg4", rate=8)
            stream.width = stream.height = 16
            stream.pix_fmt = "yuv420p"
            for i in range(4):
                rgb = np.full((16, 16, 3), 40 + 50 * i, dtype=np.uint8)
                for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        _CLIP.append(buffer.getvalue())
    return _CLIP[0]


@pytest.fixture(scope="module")
def pair(comfyui_dir, tmp_path_factory):
    # Module-scoped (start_comfyui is per test): the isolated server may build the shared
    # environment at its first start.
    env = {"AIRLOCK_HOME": str(AIRLOCK_HOME)}
    servers: list[ComfyUI] = []

    def start(base: Path, timeout: float) -> ComfyUI:
        ui = ComfyUI(comfyui_dir, base, env=env, startup_timeout=timeout, start=False)
        servers.append(ui)
        return ui.start()

    tmp = tmp_path_factory.mktemp("parity")
    # The pack imports ComfyUI's model management at import: on a machine without a GPU the
    # command's scan must run it as ComfyUI runs here (--cpu), or the pack fails to load.
    objects, said = isolate_by_command(comfyui_dir, tmp, "pack-objects", PACKS["pack-objects"], env)
    assert (
        "POTintApply" in said
        and 'dependencies = [\n    "torch",\n]' in (objects / "airlock.toml").read_text()
    ), said
    try:
        yield start_pair(start, tmp, PACKS, prepare=_models, isolated={"pack-objects": objects})
    finally:
        for ui in servers:
            ui.stop()


def test_v1_object_info_is_native(pair):
    native = assert_same_object_info(pair, "real-shapes-v1")
    # Every node ComfyUI can describe, and none it cannot; python_module is the pack's.
    assert set(native) == {
        "ShapesSampler",
        "ShapesLLMLoader",
        "ShapesNoise",
        "ShapesDigest",
        "ShapesProgram",
        "ShapesOwnServer",
        "ShapesAlwaysRun",
        "ShapesMergeBlocks",
        "ShapesV3Range",
        "ShapesGate",
        "ShapesAnySwitch",
    }
    assert native["ShapesLLMLoader"]["input"]["required"]["model"] == [["tiny.gguf"]]
    assert "euler" in native["ShapesSampler"]["input"]["required"]["sampler_name"][0]
    assert "skipped: its INPUT_TYPES raised RuntimeError" in pair.isolated.log_text()


def test_v3_object_info_is_native(pair):
    native = assert_same_object_info(pair, "real-shapes-v3")
    assert set(native) == {
        "ShapesV3Repeat",
        "ShapesV3Noise",
        "ShapesV3Digest",
        "ShapesV3Old",
        "ShapesV3Prompt",
        "ShapesV3ClassOf",
        "ShapesV3Join",
        "ShapesV3Pick",
        "ShapesV3Switch",
        "ShapesV3Show",
        "ShapesV3Clip",
        "ShapesV3Frames",
        "ShapesV3Make3D",
        "ShapesV3Read3D",
        "ShapesV3Vision",
        "ShapesV3ReadCond",
        "ShapesV3CondPass",
        "ShapesV3Curve",
    }
    # A str Enum in a schema (display_mode) serves as its value, as natively.
    assert native["ShapesV3Repeat"]["input"]["required"]["times"][1]["display"] == "slider"
    repeat = native["ShapesV3Repeat"]
    # The V3 shapes a V1 proxy got wrong: false flags, tooltips, no aliases, hidden inputs.
    assert repeat["deprecated"] is False and repeat["experimental"] is False
    assert repeat["output_tooltips"] == ["text, times over"]
    assert repeat["search_aliases"] is None
    assert repeat["input"]["hidden"] == {"unique_id": ["UNIQUE_ID"], "dynprompt": ["DYNPROMPT"]}
    assert native["ShapesV3Noise"]["search_aliases"] == ["random image"]
    assert repeat["python_module"] == module_of("real-shapes-v3")


def test_v1_outputs_are_native(pair):
    prompt = {
        "1": {
            "class_type": "ShapesSampler",
            "inputs": {"sampler_name": "euler", "scheduler": "karras", "width": 640},
        },
        "2": {"class_type": "ShapesProgram", "inputs": {"summary": ["1", 0]}},
        "3": {"class_type": "ShapesNoise", "inputs": {"seed": 11, "size": 24}},
        "4": {"class_type": "ShapesDigest", "inputs": {"image": ["3", 0]}},
        "5": {"class_type": "ShapesV3Range", "inputs": {"start": 2, "stop": 9}},
        "6": {"class_type": "PreviewAny", "inputs": {"source": ["5", 0]}},
        "7": {"class_type": "PreviewAny", "inputs": {"source": ["5", 1]}},
        # A closed gate blocks its branch (ComfyUI's ExecutionBlocker), an open one does not.
        "g1": {"class_type": "ShapesGate", "inputs": {"text": "shut", "open": False}},
        "p1": {"class_type": "PreviewAny", "inputs": {"source": ["g1", 0]}},
        "g2": {"class_type": "ShapesGate", "inputs": {"text": "through", "open": True}},
        "p2": {"class_type": "PreviewAny", "inputs": {"source": ["g2", 0]}},
        # ComfyUI's own API at its flags' address (comfy_mtb's history node does this).
        "s": {"class_type": "ShapesOwnServer", "inputs": {"route": "/system_stats"}},
    }
    native, _ = assert_same_outputs(pair, prompt)
    assert native["s"]["text"][0].startswith("reached: comfyui "), native["s"]
    facts = json.loads(native["2"]["text"][0])
    # A V3 node of V1 mappings: its ui, its list output (one preview per item), its count.
    assert native["5"]["text"] == ["2..9"]
    assert native["6"]["text"] == ["2", "5", "8"] and native["7"]["text"] == ["3"]
    assert "p1" not in native and native["p2"]["text"] == ["through"]
    assert facts == {
        "summary": "euler/karras/640/",
        "comfy_dir_is_comfyui": True,
        "argv0": "main.py",
        "cpu_flag": True,
        "main_is_script": True,
        "builtin_extras_loaded": True,
        "latent_add": "LatentAdd",
        "merge_base": "ModelMergeBlocks",
        "llm_dirs": ["llm"],
        "python_module": module_of("real-shapes-v1"),
        "own_node_in_comfy": True,
    }
    assert native["4"]["text"][1] == "(1, 24, 24, 3)"


def test_any_types_and_flexible_inputs_are_native(pair):
    # rgthree-style flexible inputs: links and widget values the node never listed reach it;
    # an "any" type with a name of its own takes an INT link.
    prompt = {
        "n": {"class_type": "ShapesNoise", "inputs": {"seed": 2, "size": 8}},
        "r": {"class_type": "ShapesV3Range", "inputs": {"start": 1, "stop": 5}},
        "s": {
            "class_type": "ShapesAnySwitch",
            "inputs": {
                "select": 2,
                "label": ["r", 1],
                "any_01": ["n", 0],
                "any_02": ["r", 1],
                "lora_1": {"on": True, "strength": 0.5},
            },
        },
        "p": {"class_type": "PreviewAny", "inputs": {"source": ["s", 0]}},
        "q": {"class_type": "PreviewAny", "inputs": {"source": ["s", 1]}},
    }
    native, _ = assert_same_outputs(pair, prompt)
    assert native["p"]["text"] == ["2"]
    assert json.loads(native["q"]["text"][0]) == [
        2,
        {"any_01": [1, 8, 8, 3], "any_02": 2, "lora_1": {"on": True, "strength": 0.5}},
    ]


def test_bool_is_changed_reruns_as_natively(pair):
    prompt = {"1": {"class_type": "ShapesAlwaysRun", "inputs": {"label": "again"}}}
    first, _ = assert_same_outputs(pair, prompt)
    second, _ = assert_same_outputs(pair, prompt)
    # ComfyUI calls True(), warns, and re-runs the node every time; so does its proxy.
    assert first["1"]["text"] == ["again:1"] and second["1"]["text"] == ["again:2"]


def test_v3_outputs_are_native(pair):
    prompt = {
        "1": {"class_type": "ShapesV3Repeat", "inputs": {"text": "ab", "times": 3, "sep": "+"}},
        "2": {"class_type": "ShapesV3Noise", "inputs": {"seed": 5}},
        "3": {"class_type": "ShapesV3Digest", "inputs": {"image": ["2", 0], "label": ["1", 0]}},
        "4": {"class_type": "ShapesV3Prompt", "inputs": {"prompt": "a dog"}},
        "5": {"class_type": "PreviewAny", "inputs": {"source": ["4", 0]}},
    }
    native, _ = assert_same_outputs(pair, prompt)
    # The lazy label was asked for, and carries the hidden unique_id of its node and what its
    # DYNPROMPT says of it.
    assert native["3"]["text"][0] == "ab+ab+ab@1:ShapesV3Repeat"
    # An input named "prompt" is the input, and hidden PROMPT the prompt (Easy-Use's
    # promptLine has both: the isolated node lost its input before this was fixed).
    assert native["5"]["text"] == ["a dog@4[1,2,3,4,5]"]


def test_v3_dynamic_inputs_are_native(pair):
    # Autogrow (lazy, one part from another node) and DynamicCombo (nested, with a tensor
    # behind a choice): the prompt names the inputs by path; ComfyUI expands the schema and
    # nests them before the node runs. And MatchType, whose type follows what is connected.
    prompt = {
        "1": {
            "class_type": "ShapesV3Join",
            "inputs": {
                "parts.part0": "a",
                "parts.part1": ["10", 0],
                "parts.part2": "c",
                "sep": "+",
            },
        },
        "10": {"class_type": "ShapesV3Repeat", "inputs": {"text": "b", "times": 1, "sep": "-"}},
        "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}},
        "3": {"class_type": "ShapesV3Noise", "inputs": {"seed": 5}},
        "4": {
            "class_type": "ShapesV3Pick",
            "inputs": {
                "mode": "image",
                "mode.image": ["3", 0],
                "mode.how": "scale",
                "mode.how.factor": 0.5,
            },
        },
        "5": {"class_type": "ShapesV3Digest", "inputs": {"image": ["4", 0], "label": ["4", 1]}},
        "6": {"class_type": "ShapesV3Pick", "inputs": {"mode": "text", "mode.text": "hi"}},
        "7": {"class_type": "ShapesV3Digest", "inputs": {"image": ["6", 0], "label": ["6", 1]}},
        "8": {
            "class_type": "ShapesV3Pick",
            "inputs": {"mode": "image", "mode.image": ["3", 0], "mode.how": "invert"},
        },
        "9": {"class_type": "ShapesV3Digest", "inputs": {"image": ["8", 0], "label": ["8", 1]}},
        # A lazy MatchType switch (the shape of ComfyUI's own If/Else Switch).
        "11": {"class_type": "ShapesV3Noise", "inputs": {"seed": 9}},
        "12": {
            "class_type": "ShapesV3Switch",
            "inputs": {"switch": True, "on_true": ["4", 0], "on_false": ["11", 0]},
        },
        "13": {"class_type": "ShapesV3Digest", "inputs": {"image": ["12", 0], "label": "switch"}},
    }
    native, _ = assert_same_outputs(pair, prompt)
    assert native["13"]["text"][1] == native["5"]["text"][1]  # the on_true image, node 4's
    # The lazy part was asked for by its name and computed.
    assert native["2"]["text"] == ["part0=a+part1=b@10:ShapesV3Repeat+part2=c"]
    assert native["5"]["text"][0] == "image:scale:how,image,mode;factor,how"
    assert native["7"]["text"][0] == "text:hi"
    assert native["9"]["text"][0] == "image:invert:how,image,mode;how"


def test_a_v3_preview_is_served_as_natively(pair):
    # ui.PreviewImage(image, cls=cls): the worker writes the PNG into ComfyUI's temp folder
    # (its name has a random part, so only that part differs), with the prompt in its
    # metadata; each server then serves it under /view, and the bytes match.
    prompt = {
        "1": {"class_type": "ShapesV3Noise", "inputs": {"seed": 4}},
        "2": {"class_type": "ShapesV3Show", "inputs": {"image": ["1", 0], "note": "x"}},
    }
    seen = {}
    for side, ui in (("native", pair.native), ("isolated", pair.isolated)):
        (image,) = ui.run(prompt)["outputs"]["2"]["images"]
        assert image["type"] == "temp" and image["subfolder"] == "", (side, image)
        assert image["filename"].startswith("ComfyUI_temp_"), (side, image)
        query = urllib.parse.urlencode({**image, "type": "temp"})
        png = ui.get(f"/view?{query}", raw=True)
        assert png[:8] == b"\x89PNG\r\n\x1a\n", (side, png[:16])
        seen[side] = png
    assert seen["native"] == seen["isolated"]


def test_videos_cross_both_ways_as_natively(pair):
    # A VIDEO a pack's node makes, from frames or as an encoded file, read by ComfyUI's own Get
    # Video Components; and one ComfyUI's Create Video or Load Video makes (its frames; a
    # path in ComfyUI's input folder), read by the pack's node.
    frames = {"class_type": "RepeatImageBatch", "inputs": {"image": ["1", 0], "amount": 4}}
    prompt = {
        "1": {"class_type": "ShapesV3Noise", "inputs": {"seed": 3}},
        "2": frames,
        "3": {
            "class_type": "ShapesV3Clip",
            "inputs": {"images": ["2", 0], "fps": 8.0, "made": "frames"},
        },
        "4": {"class_type": "GetVideoComponents", "inputs": {"video": ["3", 0]}},
        "5": {"class_type": "ShapesV3Digest", "inputs": {"image": ["4", 0], "label": "frames"}},
        "6": {
            "class_type": "ShapesV3Clip",
            "inputs": {"images": ["2", 0], "fps": 12.5, "made": "file"},
        },
        "7": {"class_type": "GetVideoComponents", "inputs": {"video": ["6", 0]}},
        "8": {"class_type": "ShapesV3Digest", "inputs": {"image": ["7", 0], "label": "file"}},
        "9": {"class_type": "CreateVideo", "inputs": {"images": ["2", 0], "fps": 6.0}},
        "10": {"class_type": "ShapesV3Frames", "inputs": {"video": ["9", 0]}},
        "11": {"class_type": "ShapesV3Digest", "inputs": {"image": ["10", 0], "label": ["10", 1]}},
        "14": {"class_type": "LoadVideo", "inputs": {"file": "airlock-clip.mp4"}},
        "15": {"class_type": "ShapesV3Frames", "inputs": {"video": ["14", 0]}},
        "16": {"class_type": "ShapesV3Digest", "inputs": {"image": ["15", 0], "label": ["15", 1]}},
        "12": {"class_type": "PreviewAny", "inputs": {"source": ["4", 2]}},
        "13": {"class_type": "PreviewAny", "inputs": {"source": ["7", 2]}},
    }
    native, _ = assert_same_outputs(pair, prompt)
    assert native["11"]["text"][0] == "VideoFromComponents (4, 16, 16, 3) 6 8"
    assert native["12"]["text"] == ["8.0"] and native["13"]["text"] == ["12.5"]
    # Load Video's file, read by the pack's node from its path in ComfyUI's input folder.
    assert native["16"]["text"][0] == "VideoFromFile (4, 16, 16, 3) 8 8"


def test_3d_and_svg_values_cross_both_ways_as_natively(pair):
    # What a 3D pack makes (a textured MESH with a field of its own, a VOXEL grid, a SPLAT, an
    # SVG, OBJ files as File3D from bytes and from a path) goes into ComfyUI's own Save GLB,
    # Save SVG, Voxel to Mesh and splat nodes; what those make comes back to the pack's node.
    # The saved files are served by each server, byte for byte the same.
    splat = {
        f"{op}_{axis}": 1.0 if op == "scale" else 0.0
        for op in ("translate", "rotate", "scale")
        for axis in "xyz"
    }
    splat["translate_x"] = 0.5
    prompt = {
        "1": {"class_type": "ShapesV3Make3D", "inputs": {"seed": 5}},
        "2": {"class_type": "SaveGLB", "inputs": {"mesh": ["1", 0], "filename_prefix": "3d/mesh"}},
        "3": {"class_type": "SaveGLB", "inputs": {"mesh": ["1", 4], "filename_prefix": "3d/bytes"}},
        "4": {"class_type": "SaveGLB", "inputs": {"mesh": ["1", 5], "filename_prefix": "3d/path"}},
        "5": {"class_type": "SaveSVGNode", "inputs": {"svg": ["1", 3], "filename_prefix": "svg/a"}},
        "6": {
            "class_type": "VoxelToMesh",
            "inputs": {"voxel": ["1", 1], "algorithm": "basic", "threshold": 0.5},
        },
        "7": {"class_type": "TransformSplat", "inputs": {"splat": ["1", 2], **splat}},
        "8": {"class_type": "SplatToFile3D", "inputs": {"splat": ["7", 0], "format": "ply"}},
        "9": {
            "class_type": "ShapesV3Read3D",
            "inputs": {"mesh": ["6", 0], "splat": ["7", 0], "svg": ["5", 0], "file": ["8", 0]},
        },
        "10": {"class_type": "PreviewAny", "inputs": {"source": ["9", 0]}},
        "11": {
            "class_type": "ShapesV3Read3D",
            "inputs": {"mesh": ["1", 0], "voxel": ["1", 1], "file": ["1", 5]},
        },
        "12": {"class_type": "PreviewAny", "inputs": {"source": ["11", 0]}},
    }
    native, isolated = assert_same_outputs(pair, prompt)
    made_here = native["10"]["text"][0].split(" | ")
    assert made_here[0].startswith("MESH(") and "faces=int64(1," in made_here[0], made_here
    assert made_here[1] == "-" and made_here[2].startswith("SPLAT(counts=None ")
    assert made_here[3].startswith("SVG ") and made_here[4].startswith("File3D ply disk=False ")
    made_by_pack = native["12"]["text"][0].split(" | ")
    assert (
        "airlock_note='tetra 5'" in made_by_pack[0]
        and "texture=float32(1, 2, 2, 3)" in (made_by_pack[0])
    )
    assert made_by_pack[1].startswith("VOXEL(data=float32(1, 8, 8, 8)")
    assert made_by_pack[4].startswith("File3D obj disk=True ")
    files = {}
    for side, ui, outputs in (
        ("native", pair.native, native),
        ("isolated", pair.isolated, isolated),
    ):
        shown = [outputs[n]["3d"][0] for n in ("2", "3", "4")] + outputs["5"]["images"]
        files[side] = []
        for item in shown:
            query = urllib.parse.urlencode({**item, "type": "output"})
            files[side].append((item["filename"], ui.get(f"/view?{query}", raw=True)))
    assert files["native"] == files["isolated"]
    assert files["native"][0][1][:4] == b"glTF" and files["native"][1][1] == files["native"][2][1]


def test_a_clip_vision_output_crosses_inside_conditioning_as_natively(pair):
    # A pack's CLIP_VISION_OUTPUT (ComfyUI's own record) into ComfyUI's Hunyuan 3D
    # conditioning, which reads it, and into unCLIP Conditioning, which puts it inside the
    # CONDITIONING it gives the pack's next node, as video and style workflows do with CLIP
    # Vision Encode's.
    prompt = {
        "1": {"class_type": "ShapesV3Vision", "inputs": {"seed": 2}},
        "2": {
            "class_type": "unCLIPConditioning",
            "inputs": {
                "conditioning": ["1", 1],
                "clip_vision_output": ["1", 0],
                "strength": 0.5,
                "noise_augmentation": 0.25,
            },
        },
        "3": {"class_type": "ShapesV3ReadCond", "inputs": {"conditioning": ["2", 0]}},
        "4": {"class_type": "PreviewAny", "inputs": {"source": ["3", 0]}},
        "5": {"class_type": "Hunyuan3Dv2Conditioning", "inputs": {"clip_vision_output": ["1", 0]}},
        "6": {"class_type": "ShapesV3ReadCond", "inputs": {"conditioning": ["5", 0]}},
        "7": {"class_type": "PreviewAny", "inputs": {"source": ["6", 0]}},
    }
    native, _ = assert_same_outputs(pair, prompt)
    parts = native["4"]["text"][0].split(" | ")
    assert parts[0].startswith("float32(1, 3, 8):") and parts[1].startswith("pooled_output=")
    assert parts[2].startswith("comfy.clip_vision.Output(image_embeds=float32(1, 8):")
    assert "image_sizes=[torch.Size([3, 4, 4])]" in parts[2] and "mm_projected=None" in parts[2]
    assert parts[3] == "0.5 0.25"
    # Hunyuan 3D's conditioning is the output's last hidden state.
    assert f"last_hidden_state={native['7']['text'][0]} " in parts[2]


def test_comfyuis_objects_inside_conditioning_pass_through_a_pack_as_natively(pair):
    # ComfyUI's Create Hook LoRA and Conditioning Set Properties put a HookGroup (an object of
    # ComfyUI's process) inside a CONDITIONING; the pack's node passes it on without looking
    # inside, and ComfyUI's next Set Properties combines the hooks it finds there with more:
    # it gets its own object back (ADR 0064). Before, the isolated node could not be given it.
    hooks = {"lora_name": "airlock-tiny.safetensors", "strength_model": 1.0, "strength_clip": 1.0}
    props = {"strength": 1.0, "set_cond_area": "default", "hooks": ["2", 0]}
    prompt = {
        "1": {"class_type": "ShapesV3Vision", "inputs": {"seed": 3}},
        "2": {"class_type": "CreateHookLora", "inputs": hooks},
        "3": {"class_type": "ConditioningSetProperties", "inputs": {"cond_NEW": ["1", 1], **props}},
        "4": {"class_type": "ShapesV3CondPass", "inputs": {"conditioning": ["3", 0]}},
        "5": {"class_type": "ConditioningSetProperties", "inputs": {"cond_NEW": ["4", 0], **props}},
        "6": {"class_type": "ShapesV3ReadCond", "inputs": {"conditioning": ["5", 0]}},
        "7": {"class_type": "PreviewAny", "inputs": {"source": ["6", 0]}},
        "8": {"class_type": "PreviewAny", "inputs": {"source": ["4", 1]}},
    }
    native, _ = assert_same_outputs(pair, prompt)
    assert native["8"]["text"][0].startswith("hooks=<object>,pooled_output=float32(1, 8):")
    parts = native["7"]["text"][0].split(" | ")
    assert "airlock_seen=True" in parts and "hooks=<object>" in parts, parts


def test_a_curve_from_comfyuis_curve_editor_is_applied_by_a_pack_as_natively(pair):
    # ComfyUI's Curve Editor makes a curve object (comfy_api's MonotoneCubicCurve); the pack's
    # node evaluates it.
    points = {"points": [[0, 0], [0.5, 0.8], [1, 1]], "interpolation": "monotone_cubic"}
    prompt = {
        "1": {"class_type": "CurveEditor", "inputs": {"curve": points}},
        "2": {"class_type": "ShapesV3Curve", "inputs": {"curve": ["1", 0]}},
        "3": {"class_type": "PreviewAny", "inputs": {"source": ["2", 0]}},
    }
    native, _ = assert_same_outputs(pair, prompt)
    assert native["3"]["text"][0].startswith("MonotoneCubicCurve 0.0000,"), native


def test_another_packs_node_is_in_node_class_mappings(pair):
    # A node of real-shapes-v1 (its own worker, isolated) feeds a node of real-shapes-v3 that
    # reads its class in nodes.NODE_CLASS_MAPPINGS, as Easy-Use's indexAnything does: the
    # worker asks the host, and sees the class's surface as natively (a KeyError before).
    prompt = {
        "1": {"class_type": "ShapesV3Range", "inputs": {"start": 2, "stop": 9}},
        "2": {"class_type": "ShapesV3ClassOf", "inputs": {"any": ["1", 0]}},
        "3": {"class_type": "PreviewAny", "inputs": {"source": ["2", 0]}},
    }
    native, _ = assert_same_outputs(pair, prompt)
    assert native["3"]["text"] == [
        "ShapesV3Range[0] list=True types=['INT', 'INT'] output_node=False "
        "required=['start', 'stop'] in=True unknown=False get=none values=3"
    ]


def test_v3_validation_is_native(pair):
    prompt = {
        "1": {"class_type": "ShapesV3Repeat", "inputs": {"text": "a", "times": 7, "sep": "-"}},
        "2": {"class_type": "ShapesV3Noise", "inputs": {"seed": 1}},
        "3": {"class_type": "ShapesV3Digest", "inputs": {"image": ["2", 0], "label": ["1", 0]}},
    }
    errors = []
    for ui in (pair.native, pair.isolated):
        with pytest.raises(PromptRejected) as rejected:
            ui.queue(prompt)
        errors.append(rejected.value.node_errors)
    assert errors[0] == errors[1]
    assert "7 is refused" in json.dumps(errors[0])


def test_prestartup_folder_is_the_hosts_too(pair):
    # The prestartup script ran in the worker; ComfyUI's own /models lists the folder it
    # registered, as it does natively.
    assert pair.isolated.get("/models/llm") == pair.native.get("/models/llm") == ["tiny.gguf"]


def test_pack_objects_object_info_is_native(pair):
    assert len(assert_same_object_info(pair, "pack-objects")) == 7


def test_pack_objects_pass_between_the_packs_nodes(pair):
    # A schedule (a plain class), segments (named tuples of arrays) and a model (a torch
    # module) go from one node of the pack to the next, and the results are the native ones.
    prompt = {
        "img": {
            "class_type": "EmptyImage",
            "inputs": {"width": 8, "height": 6, "batch_size": 1, "color": 0x3366CC},
        },
        "s": {"class_type": "POScheduleMake", "inputs": {"base": 0.8, "steps": 3}},
        "a": {
            "class_type": "POScheduleApply",
            "inputs": {"image": ["img", 0], "schedule": ["s", 0]},
        },
        "pa": {
            "class_type": "SaveImage",
            "inputs": {"images": ["a", 0], "filename_prefix": "po_a"},
        },
        "ta": {"class_type": "PreviewAny", "inputs": {"source": ["a", 1]}},
        "d": {"class_type": "POSegsDetect", "inputs": {"image": ["img", 0], "threshold": 0.25}},
        "m": {"class_type": "POSegsToMask", "inputs": {"segs": ["d", 0]}},
        "pm": {"class_type": "PreviewAny", "inputs": {"source": ["m", 1]}},
        "mi": {"class_type": "MaskToImage", "inputs": {"mask": ["m", 0]}},
        "pmi": {
            "class_type": "SaveImage",
            "inputs": {"images": ["mi", 0], "filename_prefix": "po_m"},
        },
        "l": {"class_type": "POTintLoader", "inputs": {"tint": 0.3}},
        "t": {"class_type": "POTintApply", "inputs": {"model": ["l", 0], "image": ["img", 0]}},
        "pt": {
            "class_type": "SaveImage",
            "inputs": {"images": ["t", 0], "filename_prefix": "po_t"},
        },
    }
    native, isolated = assert_same_outputs(pair, prompt)
    assert native["ta"]["text"] == ["0.8000,0.4000,0.2000"]
    assert native["pm"]["text"] == ["top-left,bottom-right"]
    # The images themselves, byte for byte (their metadata holds the same prompt).
    n_files = {p.name: p.read_bytes() for p in pair.native.output_paths({"outputs": native})}
    i_files = {p.name: p.read_bytes() for p in pair.isolated.output_paths({"outputs": isolated})}
    assert len(n_files) == 5 and n_files == i_files  # 3 scheduled, the mask, the tint


def test_a_pack_object_shown_by_comfyuis_node_reads_as_natively(pair):
    # ComfyUI's Preview as Text prints what it gets: a list of the pack's dataclasses shows
    # their repr, taken in the worker.
    prompt = {
        "k1": {"class_type": "POKeyframeMake", "inputs": {"start": 0.1, "strength": 0.5}},
        "k2": {
            "class_type": "POKeyframeMake",
            "inputs": {"start": 0.6, "strength": 1.0, "previous": ["k1", 0]},
        },
        "p": {"class_type": "PreviewAny", "inputs": {"source": ["k2", 0]}},
    }
    native, _ = assert_same_outputs(pair, prompt)
    assert native["p"]["text"] == [
        "[Keyframe(start=0.1, strength=0.5, label='kf0'), "
        "Keyframe(start=0.6, strength=1.0, label='kf1')]"
    ]


def test_a_pack_model_given_to_comfyuis_node_is_a_clear_error(pair):
    prompt = {
        "l": {"class_type": "POTintLoader", "inputs": {"tint": 0.5}},
        "m": {
            "class_type": "ModelSamplingDiscrete",
            "inputs": {"model": ["l", 0], "sampling": "eps", "zsnr": False},
        },
        "o": {"class_type": "PreviewAny", "inputs": {"source": ["m", 0]}},
    }
    entry = pair.isolated.run(prompt, timeout=300, check=False)
    err = execution_error(entry)
    assert err is not None and err["node_type"] == "ModelSamplingDiscrete", entry
    assert (
        "TintModel of the isolated pack 'pack-objects' was used outside it"
        in err["exception_message"]
    )

"""Packs in the shape of popular public ones, loaded natively by one real ComfyUI and isolated
by another: the same nodes with the same /object_info, and the same outputs bit for bit
(tests/comfyui/native_oracle.py is the oracle).

- ``real-shapes-v1``: at import it needs what ComfyUI has done before any custom node
  (``comfy.samplers``, ``comfy_extras.nodes_model_merging`` reached as attributes, a cold
  ``from comfy_extras.nodes_latent import``, its prestartup script's ``llm`` folder,
  ``__main__.__file__``); odd nodes ComfyUI tolerates (``IS_CHANGED = True``, an
  ``INPUT_TYPES`` that raises, a display name without a class).
- ``real-shapes-v3``: V3 nodes whose /object_info a V1 proxy could not reproduce.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .harness import ComfyUI, PromptRejected
from .native_oracle import assert_same_object_info, assert_same_outputs, module_of, start_pair

REPO = Path(__file__).resolve().parents[2]
TEST_PACKS = REPO / "tests" / "packs"
AIRLOCK_HOME = Path(os.environ.get("AIRLOCK_TEST_HOME") or REPO / ".cache" / "test-airlock-home")
PACKS = {
    "real-shapes-v1": TEST_PACKS / "real-shapes-v1",
    "real-shapes-v3": TEST_PACKS / "real-shapes-v3",
}


def _models(base: Path) -> None:
    llm = base / "models" / "llm"
    llm.mkdir(parents=True, exist_ok=True)
    (llm / "tiny.gguf").write_bytes(b"GGUF")


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

    try:
        yield start_pair(start, tmp_path_factory.mktemp("parity"), PACKS, prepare=_models)
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
        "ShapesAlwaysRun",
        "ShapesMergeBlocks",
    }
    assert native["ShapesLLMLoader"]["input"]["required"]["model"] == [["tiny.gguf"]]
    assert "euler" in native["ShapesSampler"]["input"]["required"]["sampler_name"][0]
    assert "skipped: its INPUT_TYPES raised RuntimeError" in pair.isolated.log_text()


def test_v3_object_info_is_native(pair):
    native = assert_same_object_info(pair, "real-shapes-v3")
    assert set(native) == {"ShapesV3Repeat", "ShapesV3Noise", "ShapesV3Digest", "ShapesV3Old"}
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
    }
    native, _ = assert_same_outputs(pair, prompt)
    facts = json.loads(native["2"]["text"][0])
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
    }
    assert native["4"]["text"][1] == "(1, 24, 24, 3)"


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
    }
    native, _ = assert_same_outputs(pair, prompt)
    # The lazy label was asked for, and carries the hidden unique_id of its node and what its
    # DYNPROMPT says of it.
    assert native["3"]["text"][0] == "ab+ab+ab@1:ShapesV3Repeat"


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

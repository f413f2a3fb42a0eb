"""The real ComfyUI 0.30.0 on CPU, driven over HTTP: the substrate for integration tests."""

from __future__ import annotations

import os

import pytest

from .harness import ComfyUI, PromptRejected, make_base_dir, output_files, tree_changes

# A core-only workflow: EmptyImage 64x64 -> SaveImage.
PROMPT = {
    "1": {
        "class_type": "EmptyImage",
        "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0xFF8000},
    },
    "2": {
        "class_type": "SaveImage",
        "inputs": {"images": ["1", 0], "filename_prefix": "airlock_smoke"},
    },
}


@pytest.fixture(scope="module")
def server(comfyui_dir, tmp_path_factory):
    """One server for this module (startup takes ~8-20 s on a 2-core CPU machine)."""
    base = make_base_dir(tmp_path_factory.mktemp("comfyui"))
    with ComfyUI(comfyui_dir, base) as ui:
        print(f"ComfyUI started in {ui.startup_seconds:.1f}s")
        yield ui


def test_starts_on_cpu_with_clean_log(server):
    stats = server.get("/system_stats")
    assert stats["system"]["comfyui_version"] == "0.30.0"
    assert [d["type"] for d in stats["devices"]] == ["cpu"]
    log = server.log_text()
    # Every comfy_extras / comfy_api_nodes module imported (their requirements are installed).
    assert "IMPORT FAILED" not in log, server.log_tail(200)
    assert "did not import correctly" not in log, server.log_tail(200)
    assert "Failed to initialize database" not in log, server.log_tail(200)


def test_object_info_has_core_nodes(server):
    info = server.object_info()
    for node in ("KSampler", "EmptyImage", "SaveImage", "CheckpointLoaderSimple", "VAEDecode"):
        assert node in info, node
    assert info["EmptyImage"]["output"] == ["IMAGE"]
    assert set(server.object_info("SaveImage")) == {"SaveImage"}


def test_runs_core_workflow_over_http(server):
    prompt_id = server.queue(PROMPT)
    entry = server.wait(prompt_id, timeout=120)
    assert entry["status"]["status_str"] == "success", entry["status"]
    assert entry["status"]["completed"] is True

    files = output_files(entry)
    assert len(files) == 1
    assert files[0]["type"] == "output"
    assert files[0]["filename"].startswith("airlock_smoke")
    (path,) = server.output_paths(entry)
    assert path.is_file()
    assert path.parent == server.output_dir / files[0]["subfolder"]
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # The websocket saw this prompt through: start, the nodes executing, success.
    server.wait_message(type="execution_success", prompt_id=prompt_id, timeout=10)
    types = [m["type"] for m in server.messages(prompt_id)]
    assert types[0] == "execution_start"
    executed = [m["data"]["node"] for m in server.messages(prompt_id, type="executed")]
    assert executed == ["2"]


def test_invalid_prompt_is_rejected_with_node_errors(server):
    bad = {"2": {"class_type": "SaveImage", "inputs": {"filename_prefix": "x"}}}
    with pytest.raises(PromptRejected) as exc:
        server.queue(bad)
    assert exc.value.status == 400
    assert "2" in exc.value.node_errors
    assert exc.value.node_errors["2"]["class_type"] == "SaveImage"


def test_runtime_dirs_stay_in_base_dir(server, comfyui_dir):
    base = server.base_dir
    for sub in ("output", "input", "temp", "user", "custom_nodes"):
        assert (base / sub).is_dir(), sub
    assert (base / "user" / "comfyui.db").is_file()
    manifest = comfyui_dir.with_name(comfyui_dir.name + ".sha256")
    if not manifest.is_file():
        pytest.skip(f"{comfyui_dir} was not made by scripts/comfyui.sh (no manifest)")
    assert tree_changes(comfyui_dir) == []


def test_env_reaches_server_and_stop_is_clean(start_comfyui, tmp_path):
    # A tiny custom node pack that reports an environment variable: env= and custom_nodes work.
    pack = tmp_path / "envpack"
    pack.mkdir()
    (pack / "__init__.py").write_text(
        "import os\n"
        "class EnvProbe:\n"
        "    @classmethod\n"
        "    def INPUT_TYPES(cls):\n"
        "        return {'required': {}}\n"
        "    RETURN_TYPES = ()\n"
        "    FUNCTION = 'run'\n"
        "    CATEGORY = 'airlock_test'\n"
        "    DESCRIPTION = os.environ.get('AIRLOCK_HARNESS_PROBE', 'unset')\n"
        "    def run(self):\n"
        "        return ()\n"
        "NODE_CLASS_MAPPINGS = {'EnvProbe': EnvProbe}\n"
    )
    base = make_base_dir(tmp_path, custom_nodes={"envpack": pack})
    ui = start_comfyui(base, env={"AIRLOCK_HARNESS_PROBE": "hello"}, websocket=False)
    assert ui.object_info("EnvProbe")["EnvProbe"]["description"] == "hello"
    pid = ui.proc.pid
    assert ui.stop() is not None
    assert not ui.alive
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)

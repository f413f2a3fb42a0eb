"""What a node learns of its prompt, inputs its code lists live, and workers started before
their nodes, against the same pack loaded natively in the same real ComfyUI 0.30.0 (ADR 0022).

The server holds two copies of tests/packs/prompt-pack, ``custom_nodes/prompt-native`` and
``isolated_nodes/prompt-iso``, each naming its nodes after its folder, so a prompt of one copy
and the same prompt of the other must give the same outputs with the names swapped; and two of
tests/packs/text-pack (a worker that starts in about a second), ``isolated_nodes/text-pre``
(``prestart = true``) and ``isolated_nodes/text-iso``. The last test restarts the server: its
scans are then cached, so no worker runs but the ones started ahead.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from .harness import ComfyUI, make_base_dir

REPO = Path(__file__).resolve().parents[2]
PACK = REPO / "tests" / "packs" / "prompt-pack"
TEXT_PACK = REPO / "tests" / "packs" / "text-pack"
AIRLOCK_HOME = Path(os.environ.get("AIRLOCK_TEST_HOME") or REPO / ".cache" / "test-airlock-home")
NATIVE, ISO = "prompt-native", "prompt-iso"
TEXT_PRE, TEXT_ISO = "text-pre", "text-iso"


@pytest.fixture(scope="module")
def server(comfyui_dir, tmp_path_factory):
    # Copies, not links: each copy names itself after its folder.
    base = make_base_dir(
        tmp_path_factory.mktemp("prompt"),
        custom_nodes={"comfy-airlock": REPO / "custom_node", NATIVE: PACK},
        isolated={ISO: PACK, TEXT_PRE: TEXT_PACK, TEXT_ISO: TEXT_PACK},
        copy=True,
    )
    (base / "custom_nodes" / NATIVE / "airlock.toml").unlink()  # a native pack has none
    with open(base / "isolated_nodes" / TEXT_PRE / "airlock.toml", "a") as f:
        f.write("prestart = true\n")
    (base / "models" / "checkpoints").mkdir(parents=True, exist_ok=True)
    env = {"AIRLOCK_HOME": str(AIRLOCK_HOME)}
    ui = ComfyUI(comfyui_dir, base, env=env, startup_timeout=1200, start=False)
    ui.start()
    yield ui
    ui.stop()


def row(ui: ComfyUI, pack: str) -> dict:
    return {r["pack"]: r for r in ui.get("/airlock/workers")}[pack]


def normalized(ui: ComfyUI, entry: dict, folder: str, prompt_id: str) -> str:
    return (
        json.dumps(entry["outputs"], sort_keys=True)
        .replace(folder, "PACK")
        .replace(prompt_id, "PROMPT_ID")
    )


def context_prompt(folder: str, tag: str) -> dict:
    return {
        "1": {"class_type": f"{folder}.Context", "inputs": {"tag": tag}},
        "2": {"class_type": f"{folder}.Expand", "inputs": {"tag": tag}},
        "3": {"class_type": f"{folder}.Show", "inputs": {"text": ["2", 0]}},
    }


def test_prompt_id_and_dynprompt_reach_the_node_as_natively(server):
    tag = uuid.uuid4().hex[:8]
    seen = {}
    for folder in (NATIVE, ISO):
        prompt = context_prompt(folder, tag)
        prompt_id = server.queue(prompt)
        entry = server.wait(prompt_id, timeout=600)
        assert entry["status"]["status_str"] == "success", entry["status"]
        seen[folder] = normalized(server, entry, folder, prompt_id)
        [top] = entry["outputs"]["1"]["context"]
        top = json.loads(top)
        assert top["prompt_id"] == top["last_prompt_id"] == prompt_id, (folder, top)
        assert (top["node_id"], top["list_index"], top["unique_id"]) == ("1", 0, "1"), top
        assert top["dynprompt"] == "DynamicPrompt", top
        assert top["original_is_prompt"] and top["all_ids"] == ["1", "2", "3"], top
        [inner] = entry["outputs"]["3"]["text"]
        inner = json.loads(inner)
        # An expanded node: its id from GraphBuilder's prefix, the expanding node its parent.
        assert inner["unique_id"] == inner["node_id"] == "2.0.0.1", (folder, inner)
        assert (inner["real"], inner["parent"], inner["display"]) == ("2", "2", "2"), inner
        assert inner["prompt_id"] == prompt_id and inner["has_node"], inner
        assert "2.0.0.1" in inner["all_ids"], inner
    assert seen[ISO] == seen[NATIVE]


def _choices(ui: ComfyUI, folder: str) -> list[str]:
    node = f"{folder}.Checkpoint"
    return ui.object_info(node)[node]["input"]["required"]["ckpt_name"][0]


def _wait_listed(ui: ComfyUI, folder: str, name: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while name not in _choices(ui, folder):
        assert time.monotonic() < deadline, f"{name} never listed by {folder}"
        time.sleep(0.5)


def test_a_dropdown_lists_a_model_file_added_after_start(server):
    checkpoints = server.base_dir / "models" / "checkpoints"
    server.run({"1": {"class_type": f"{ISO}.Context", "inputs": {"tag": uuid.uuid4().hex}}})
    assert row(server, ISO)["state"] == "running"

    added = f"added-{uuid.uuid4().hex[:8]}.safetensors"
    (checkpoints / added).write_bytes(b"")
    assert added in _choices(server, NATIVE)  # native: its INPUT_TYPES runs again
    _wait_listed(server, ISO, added)  # isolated: the worker's answer, at most TTL_S old
    entry = server.run({"1": {"class_type": f"{ISO}.Checkpoint", "inputs": {"ckpt_name": added}}})
    assert entry["outputs"]["1"]["text"] == [added]  # validated against the live list too

    # No worker: the last answer stands, and asking starts none.
    before = row(server, ISO)
    os.kill(before["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while row(server, ISO)["state"] != "idle":
        assert time.monotonic() < deadline, "the killed worker is still shown running"
        time.sleep(0.2)
    later = f"later-{uuid.uuid4().hex[:8]}.safetensors"
    (checkpoints / later).write_bytes(b"")
    assert later in _choices(server, NATIVE)
    choices = _choices(server, ISO)
    assert added in choices and later not in choices
    after = row(server, ISO)
    assert after["state"] == "idle" and after["generation"] == before["generation"], after


def test_workers_start_before_their_nodes_after_a_restart(server):
    server.stop()
    server.start()  # every scan is cached now: no worker runs unless started ahead
    deadline = time.monotonic() + 300
    while row(server, TEXT_PRE)["state"] != "running":
        pre = row(server, TEXT_PRE)
        assert time.monotonic() < deadline, f"prestart: no worker for {TEXT_PRE}: {pre}"
        time.sleep(0.2)
    for pack in (ISO, TEXT_ISO):  # not asked to start with ComfyUI
        idle = row(server, pack)
        assert idle["state"] == "idle" and idle["calls"] == 0, idle
    assert "worker(s) of ['text-pre'] start with ComfyUI (prestart)" in server.log_text()

    # The isolated node runs after 2 s of native work: its worker starts when it is queued.
    prompt = {
        "1": {
            "class_type": f"{NATIVE}.Wait",
            "inputs": {"seconds": 2.0, "text": uuid.uuid4().hex},
        },
        "2": {"class_type": f"{TEXT_ISO}.Echo", "inputs": {"text": ["1", 0]}},
    }
    server.run(prompt, timeout=600)
    iso = row(server, TEXT_ISO)
    assert iso["state"] == "running", iso
    assert iso["started_at"] < iso["last_node_at"], iso
    assert "a queued prompt starts the worker(s) of ['text-iso']" in server.log_text()
    assert row(server, ISO)["state"] == "idle"  # the prompt has none of its nodes

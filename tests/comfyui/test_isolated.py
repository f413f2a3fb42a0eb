"""End to end: the real ComfyUI 0.30.0 on CPU, with comfy-airlock's custom node and isolated
packs, driven over HTTP like a user's browser would.

One server serves the whole module (it builds the packs' environments at its first start; they
are kept in ``.cache/test-airlock-home`` between runs, content-addressed, so later runs reuse
them):

- ``isolated_nodes/legacy-numpy``: Python 3.10 + numpy 1.x, V1 nodes, no torch;
- ``isolated_nodes/tiny-model``: V3 nodes holding a torch model, imports ``comfy``;
- ``isolated_nodes/e2e-nodes``: one V1 node per behaviour (errors, hidden inputs, validation,
  lazy inputs, progress, state);
- ``isolated_nodes/broken-env``: a requirement that does not exist;
- ``custom_nodes/optin-pack``: opts in with ``register_nodes()``;
- ``custom_nodes/misplaced-pack``: has an ``airlock.toml`` but does not opt in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .harness import ComfyUI, PromptRejected, execution_error, make_base_dir, tree_changes

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "packs"
TEST_PACKS = REPO / "tests" / "packs"
AIRLOCK_HOME = Path(os.environ.get("AIRLOCK_TEST_HOME") or REPO / ".cache" / "test-airlock-home")


@pytest.fixture(scope="module")
def server(comfyui_dir, tmp_path_factory):
    base = make_base_dir(
        tmp_path_factory.mktemp("e2e"),
        custom_nodes={
            "comfy-airlock": REPO / "custom_node",
            "optin-pack": TEST_PACKS / "optin-pack",
            "misplaced-pack": TEST_PACKS / "misplaced-pack",
        },
        isolated={
            "legacy-numpy": EXAMPLES / "legacy-numpy",
            "tiny-model": EXAMPLES / "tiny-model",
            "e2e-nodes": TEST_PACKS / "e2e-nodes",
            "broken-env": TEST_PACKS / "broken-env",
            "memory-pack": TEST_PACKS / "memory-pack",
        },
    )
    env = {"AIRLOCK_HOME": str(AIRLOCK_HOME), "E2E_SALT": "1"}
    # Environments are built during ComfyUI's start the first time: allow for it.
    ui = ComfyUI(comfyui_dir, base, env=env, startup_timeout=1200, start=False)
    ui.start()
    yield ui
    ui.stop()


def workers(ui: ComfyUI) -> dict[str, dict]:
    return {row["pack"]: row for row in ui.get("/airlock/workers")}


def report_texts(entry: dict, node: str) -> list[str]:
    return entry["outputs"][node]["text"]


PIPELINE = {
    "1": {"class_type": "LegacyNoiseImage", "inputs": {"width": 64, "height": 48, "seed": 7}},
    "2": {"class_type": "LegacyPosterize", "inputs": {"image": ["1", 0], "levels": 3}},
    "3": {
        "class_type": "TinyModelEnhance",
        "inputs": {"image": ["2", 0], "strength": 1.0, "steps": 3},
    },
    "4": {"class_type": "E2EScale", "inputs": {"image": ["3", 0], "factor": 0.5}},
    "5": {
        "class_type": "SaveImage",
        "inputs": {"images": ["4", 0], "filename_prefix": "airlock-e2e"},
    },
    "6": {"class_type": "LegacyVersions", "inputs": {}},
    "7": {"class_type": "E2EReport", "inputs": {"text": ["6", 0]}},
    "8": {"class_type": "TinyModelInfo", "inputs": {"image": ["3", 0]}},
    "9": {"class_type": "E2EReport", "inputs": {"text": ["8", 0]}},
}


def test_isolated_nodes_look_native(server):
    info = server.object_info()
    for node in (
        "LegacyNoiseImage",
        "LegacyPosterize",
        "TinyModelEnhance",
        "E2EScale",
        "OptInEcho",
    ):
        assert node in info, f"{node} not registered"
    noise = info["LegacyNoiseImage"]
    assert noise["input"]["required"]["width"] == [
        "INT",
        {"default": 64, "min": 8, "max": 4096, "step": 8},
    ]
    assert noise["output"] == ["IMAGE"]
    assert noise["display_name"] == "Legacy Noise Image (numpy 1, Python 3.10)"
    assert noise["category"] == "airlock examples"
    enhance = info["TinyModelEnhance"]  # V3, through its V1 description
    assert enhance["input"]["required"]["steps"][0] == "INT"
    assert enhance["display_name"] == "Tiny Model Enhance (isolated, torch)"
    # A V3 node's entry is its GET_NODE_INFO_V1, as natively (hidden inputs as tuples).
    assert info["TinyModelInfo"]["input"]["hidden"] == {"unique_id": ["UNIQUE_ID"]}
    assert enhance["python_module"] == "custom_nodes.tiny-model"
    assert info["E2EReport"]["output_node"] is True
    # Nothing of the broken or misplaced packs, and ComfyUI's own nodes are all there.
    assert "KSampler" in info and "SaveImage" in info


def test_pipeline_across_three_environments(server):
    pid = server.queue(PIPELINE, extra_data={"extra_pnginfo": {"workflow": {"note": "e2e"}}})
    entry = server.wait(pid, timeout=600)
    assert entry["status"]["status_str"] == "success", server.log_tail()
    [image] = server.output_paths(entry)
    assert image.is_file() and image.stat().st_size > 0
    versions, hidden, path = report_texts(entry, "7")
    assert versions.startswith("python 3.10.") and "numpy 1.26." in versions
    assert hidden == "unique_id=7 prompt_nodes=9 extra={'workflow': {'note': 'e2e'}}"
    assert Path(path).parent == server.output_dir and Path(path).read_text() == versions
    model_text = report_texts(entry, "9")[0]
    assert model_text.startswith("node 8: torch 2.15.0") and "loads=1" in model_text
    assert "image=(1, 48, 64, 3)" in model_text


def test_same_workflow_again_is_served_from_comfyui_cache(server):
    server.run(PIPELINE, timeout=600)
    before = {k: v["calls"] for k, v in workers(server).items() if "calls" in v}
    entry = server.run(PIPELINE, timeout=120)
    after = {k: v["calls"] for k, v in workers(server).items() if "calls" in v}
    assert after == before, "a cached node reached a worker"
    cached = [m for m in entry["status"]["messages"] if m[0] == "execution_cached"]
    assert set(cached[0][1]["nodes"]) >= {"1", "2", "3", "4", "8"}


def test_conflicting_pack_would_break_the_host(server):
    # The same pack imported into ComfyUI's own environment (numpy 2) fails at import...
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import runpy; runpy.run_path({str(EXAMPLES / 'legacy-numpy' / '__init__.py')!r})",
        ],
        capture_output=True,
        text=True,
    )
    assert probe.returncode != 0 and "float_" in probe.stderr
    # ...while isolated it runs, on its own Python and numpy.
    row = workers(server)["legacy-numpy"]
    assert row["python"].startswith("3.10.") and row["numpy"].startswith("1.26.")
    assert row["state"] == "running" and row["pid"] != os.getpid()


def test_error_reaches_comfyui_with_the_worker_traceback(server):
    prompt = {
        "1": {"class_type": "LegacyNoiseImage", "inputs": {"width": 8, "height": 8, "seed": 1}},
        "2": {"class_type": "E2EFail", "inputs": {"image": ["1", 0], "reason": "checked"}},
        "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
    }
    entry = server.run(prompt, timeout=300, check=False)
    err = execution_error(entry)
    assert err is not None and err["node_type"] == "E2EFail"
    assert err["exception_type"] == "ValueError"
    msg = err["exception_message"]
    assert "e2e: deliberate failure in the worker (checked)" in msg
    assert "_fail_deep" in msg and "e2e-nodes" in msg  # the worker's frames
    # A KeyError reads as natively (the key, quoted), then the worker's traceback as lines.
    missing = {
        "1": {"class_type": "LegacyNoiseImage", "inputs": {"width": 8, "height": 8, "seed": 1}},
        "2": {"class_type": "E2EFail", "inputs": {"image": ["1", 0], "reason": "key:style"}},
        "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
    }
    err = execution_error(server.run(missing, timeout=300, check=False))
    assert err["exception_type"] == "KeyError"
    assert err["exception_message"].startswith("'style'\n\n[comfy-airlock] 'E2EFail' raised")
    assert "\n  File " in err["exception_message"] and "_fail_deep" in err["exception_message"]
    # A node that raises ComfyUI's interrupt stops its prompt as interrupted, as natively.
    missing["2"]["inputs"]["reason"] = "stop"
    stopped = server.run(missing, timeout=300, check=False)
    kinds = [m[0] for m in stopped["status"]["messages"]]
    assert "execution_interrupted" in kinds and "execution_error" not in kinds, stopped
    # ComfyUI and the worker carry on.
    ok = server.run(
        {
            "1": {"class_type": "E2EState", "inputs": {"tag": "after-error"}},
            "2": {"class_type": "E2EReport", "inputs": {"text": ["1", 0]}},
        },
        timeout=120,
    )
    assert report_texts(ok, "2")[0].startswith("runs:")


def test_validate_inputs_runs_in_the_worker(server):
    bad = {
        "1": {"class_type": "E2EValidated", "inputs": {"text": "bad"}},
        "2": {"class_type": "E2EReport", "inputs": {"text": ["1", 0]}},
    }
    with pytest.raises(PromptRejected) as exc:
        server.queue(bad)
    assert "the worker refused text 'bad'" in json.dumps(exc.value.node_errors)
    good = {
        "1": {"class_type": "E2EValidated", "inputs": {"text": "fine"}},
        "2": {"class_type": "E2EReport", "inputs": {"text": ["1", 0]}},
    }
    assert report_texts(server.run(good, timeout=120), "2")[0] == "echo:fine"


def test_lazy_inputs_and_node_state(server):
    prompt = {
        "a": {"class_type": "E2EValidated", "inputs": {"text": "A"}},
        "b": {"class_type": "E2EValidated", "inputs": {"text": "B"}},
        "l": {"class_type": "E2ELazy", "inputs": {"use_a": False, "a": ["a", 0], "b": ["b", 0]}},
        "r": {"class_type": "E2EReport", "inputs": {"text": ["l", 0]}},
        "s": {"class_type": "E2EState", "inputs": {"tag": "lazy"}},
        "t": {"class_type": "E2EReport", "inputs": {"text": ["s", 0]}},
    }
    entry = server.run(prompt, timeout=120)
    assert report_texts(entry, "r")[0] == "lazy:echo:B"
    first = int(report_texts(entry, "t")[0].split(":")[1])
    again = server.run(prompt, timeout=120)
    assert int(report_texts(again, "t")[0].split(":")[1]) == first + 1  # same instance, its self


def test_progress_and_ui_messages_reach_the_websocket(server):
    prompt = {
        "p": {"class_type": "E2EProgress", "inputs": {"steps": 3}},
        "r": {"class_type": "E2EReport", "inputs": {"text": ["p", 0]}},
    }
    pid = server.queue(prompt, extra_data={})
    entry = server.wait(pid, timeout=120)
    assert report_texts(entry, "r")[0] == "progress:3"
    # /history can answer before the websocket has delivered everything; it is in order.
    server.wait_message(type="execution_success", prompt_id=pid, timeout=30)
    progress = [m["data"] for m in server.messages(prompt_id=pid, type="progress")]
    assert {(p["value"], p["max"], p["node"]) for p in progress} >= {(1, 3, "p"), (3, 3, "p")}
    custom = [m["data"] for m in server.messages(type="airlock-e2e")]
    assert [c["step"] for c in custom[-3:]] == [0, 1, 2]
    # The preview (a PIL image in the worker) reached the browser as a binary frame.
    assert server.messages(type="binary"), "no preview frame"


def test_worker_sees_the_hosts_flags_and_folders(server):
    prompt = {
        "1": {"class_type": "E2EComfyState", "inputs": {}},
        "2": {"class_type": "E2EReport", "inputs": {"text": ["1", 0]}},
    }
    text = report_texts(server.run(prompt, timeout=120), "2")[0]
    assert text == f"cpu=True device=cpu output={server.output_dir}"


def test_an_isolated_image_nodes_output_is_sent_without_a_copy(server):
    """The worker's IMAGE output is born in its shared memory (ADR 0044) and sent as a
    reference: each run of the filter adds one to the worker's sent-as-born count."""

    def run(factor: float) -> tuple[int, int]:
        prompt = {
            "1": {
                "class_type": "EmptyImage",
                "inputs": {"width": 512, "height": 512, "batch_size": 1, "color": 0xFF8000},
            },
            "2": {"class_type": "E2EScale", "inputs": {"image": ["1", 0], "factor": factor}},
            "3": {"class_type": "E2EBornStats", "inputs": {"image": ["2", 0]}},
            "4": {"class_type": "E2EReport", "inputs": {"text": ["3", 0]}},
        }
        text = report_texts(server.run(prompt, timeout=120), "4")[0]
        assert text != "off", "the pack's worker started without libairlock_born.so"
        fields = dict(part.split("=") for part in text.split())
        return int(fields["sent"]), int(fields["refused"])

    sent, refused = run(0.3125)
    assert sent >= 1
    again, refused_again = run(0.1875)  # a new factor: ComfyUI runs the filter again
    assert (again, refused_again) == (sent + 1, refused)


def test_latent_and_conditioning_cross_both_ways(server):
    prompt = {
        "e": {
            "class_type": "EmptyLatentImage",
            "inputs": {"width": 64, "height": 32, "batch_size": 2},
        },
        "s": {"class_type": "E2ELatentShift", "inputs": {"samples": ["e", 0], "amount": 0.5}},
        "u": {
            "class_type": "LatentUpscaleBy",
            "inputs": {"samples": ["s", 0], "upscale_method": "nearest-exact", "scale_by": 2.0},
        },
        "i": {"class_type": "E2ELatentInfo", "inputs": {"samples": ["u", 0]}},
        "r": {"class_type": "E2EReport", "inputs": {"text": ["i", 0]}},
        "c": {"class_type": "E2EConditioning", "inputs": {"tokens": 5}},
        "ci": {"class_type": "E2EConditioningInfo", "inputs": {"conditioning": ["c", 0]}},
        "cr": {"class_type": "E2EReport", "inputs": {"text": ["ci", 0]}},
    }
    entry = server.run(prompt, timeout=120)
    # EmptyLatentImage (ComfyUI) -> shift (worker) -> upscale (ComfyUI) -> info (worker).
    assert report_texts(entry, "r")[0] == "latent (2, 4, 8, 16) mean=0.500 tag=shifted"
    assert report_texts(entry, "cr")[0] == "cond (1, 5, 8) pooled=16.0 area=(8, 8, 0, 0)"


def test_a_packs_model_stays_in_its_worker(server):
    # ComfyUI holds a reference (ADR 0023): its Preview as Text shows the model's repr, and a
    # node of ComfyUI's that uses the model fails, naming the pack.
    shown = server.run(
        {
            "m": {"class_type": "E2EModelOut", "inputs": {}},
            "p": {"class_type": "PreviewAny", "inputs": {"source": ["m", 0]}},
        },
        timeout=120,
    )
    assert shown["outputs"]["p"]["text"] == ["Linear(in_features=2, out_features=2, bias=True)"]
    prompt = {
        "m": {"class_type": "E2EModelOut", "inputs": {}},
        "s": {
            "class_type": "ModelSamplingDiscrete",
            "inputs": {"model": ["m", 0], "sampling": "eps", "zsnr": False},
        },
        "p": {"class_type": "PreviewAny", "inputs": {"source": ["s", 0]}},
    }
    entry = server.run(prompt, timeout=120, check=False)
    err = execution_error(entry)
    assert err is not None and err["node_type"] == "ModelSamplingDiscrete", entry
    assert (
        "Linear of the isolated pack 'e2e-nodes' was used outside it" in (err["exception_message"])
    )


def test_broken_and_misplaced_packs_are_named_and_comfyui_serves(server):
    rows = workers(server)
    broken = rows["broken-env"]
    assert broken["state"] == "failed"
    assert "airlock-no-such-package-xyz" in broken["error"]
    misplaced = rows["misplaced-pack"]
    assert misplaced["state"] == "failed" and "custom_nodes" in misplaced["error"]
    log = server.log_text()
    assert "pack 'broken-env' is not loaded" in log
    assert server.get("/system_stats")["system"]["comfyui_version"] == "0.30.0"
    doctor = subprocess.run(
        [
            sys.executable,
            "-m",
            "comfy_airlock.cli",
            "doctor",
            "--base",
            str(server.base_dir),
            "--comfyui",
            str(server.comfyui_dir),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "AIRLOCK_HOME": str(AIRLOCK_HOME)},
        timeout=300,
    )
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert "broken-env" in doctor.stdout
    assert "legacy-numpy" in doctor.stdout


def test_opt_in_pack_runs_in_its_worker(server):
    prompt = {
        "1": {"class_type": "OptInEcho", "inputs": {"text": "yo"}},
        "2": {"class_type": "E2EReport", "inputs": {"text": ["1", 0]}},
    }
    text = report_texts(server.run(prompt, timeout=300), "2")[0]
    assert text.startswith("optin:yo:worker=1:prestartup=ran:")  # its worker ran it first
    assert not text.endswith(sys.prefix)  # its own environment, not ComfyUI's
    # ComfyUI ran it too, in its own process, and comfy-airlock says so.
    assert "'optin-pack': ComfyUI has run its prestartup_script.py" in server.log_text()


def test_host_comfyui_is_unpatched(server, comfyui_dir):
    assert tree_changes(comfyui_dir) == []


def test_worker_models_are_in_comfyuis_ledger_and_free_releases_them(server):
    prompt = {
        "m": {
            "class_type": "MemoryPackNode",
            "inputs": {"name": "held", "mib": 4, "device": "cpu"},
        },
        "r": {"class_type": "E2EReport", "inputs": {"text": ["m", 0]}},
    }
    server.run(prompt, timeout=300)
    status = server.get("/airlock/status")
    [row] = [w for w in status["workers"] if w["pack"] == "memory-pack"]
    [model] = [m for m in row["models"] if m["name"] == "held"]
    assert model["resident"] == 4 * 1024 * 1024 and model["in_ledger"] and model["device"] == "cpu"
    assert any(e["kind"] == "worker" and "held" in e["name"] for e in status["ledger"])
    cli = subprocess.run(
        [sys.executable, "-m", "comfy_airlock.cli", "status", "--url", server.url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert "memory-pack" in cli.stdout and "held #" in cli.stdout
    # ComfyUI's "Free model and node cache" button: upstream unload_all_models() reaches the
    # worker's model through its stand-in.
    server.post("/free", {"unload_models": True})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = server.get("/airlock/status")
        [row] = [w for w in status["workers"] if w["pack"] == "memory-pack"]
        held = [m for m in row["models"] if m["name"] == "held"]
        if held and held[0]["resident"] == 0 and not held[0]["in_ledger"]:
            break
        time.sleep(0.3)
    else:
        raise AssertionError(f"the worker model was not released: {status}")
    assert not any(e["kind"] == "worker" for e in status["ledger"])
    # Running the node again (other inputs, so not from the cache) loads it back, and it is in
    # the ledger again.
    again = {
        "m": {
            "class_type": "MemoryPackNode",
            "inputs": {"name": "held", "mib": 5, "device": "cpu"},
        },
        "r": {"class_type": "E2EReport", "inputs": {"text": ["m", 0]}},
    }
    server.run(again, timeout=120)
    [row] = [w for w in server.get("/airlock/status")["workers"] if w["pack"] == "memory-pack"]
    [model] = [m for m in row["models"] if m["name"] == "held"]
    assert model["resident"] == 4 * 1024 * 1024 and model["in_ledger"]


def test_an_oom_in_a_worker_takes_comfyuis_oom_branch_to_its_models(server):
    prompt = {
        "o": {"class_type": "MemoryPackOOM", "inputs": {"name": "oom-held", "mib": 2}},
        "r": {"class_type": "E2EReport", "inputs": {"text": ["o", 0]}},
    }
    entry = server.run(prompt, timeout=300, check=False)
    err = execution_error(entry)
    assert err is not None and "OutOfMemoryError" in err["exception_type"]
    assert "This error means you ran out of memory" in err["exception_message"]  # upstream's tip
    assert "Got an OOM, unloading all loaded models." in server.log_text()
    [row] = [w for w in server.get("/airlock/status")["workers"] if w["pack"] == "memory-pack"]
    [model] = [m for m in row["models"] if m["name"] == "oom-held"]
    assert model["resident"] == 0 and not model["in_ledger"]

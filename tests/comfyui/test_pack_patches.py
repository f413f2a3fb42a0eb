"""A pack that replaces ComfyUI's functions when it is imported (smZNodes' sampler, the prompt
packs' validation), isolated in the real ComfyUI: the start says, naming each function, that
the replacement happened in the pack's worker only (ADR 0053), and the pack's nodes run."""

from __future__ import annotations

import os
from pathlib import Path

from .harness import make_base_dir

REPO = Path(__file__).resolve().parents[2]
AIRLOCK_HOME = Path(os.environ.get("AIRLOCK_TEST_HOME") or REPO / ".cache" / "test-airlock-home")


def test_functions_a_pack_replaces_at_import_are_named(start_comfyui, tmp_path):
    base = make_base_dir(
        tmp_path,
        custom_nodes={"comfy-airlock": REPO / "custom_node"},
        isolated={"patching-pack": REPO / "tests" / "packs" / "patching-pack"},
    )
    ui = start_comfyui(base, env={"AIRLOCK_HOME": str(AIRLOCK_HOME)}, startup_timeout=1200)
    log = ui.log_text()
    want = (
        "pack 'patching-pack' replaces ComfyUI's comfy.samplers.KSampler.sample, "
        "execution.validate_inputs when it is imported; isolated, it does so in its own "
        "worker only"
    )
    assert want in log, log[-3000:]
    # RES4LYF's shape: a scheduler added to ComfyUI's lists, named; ComfyUI's own KSampler
    # does not offer it isolated (natively it would).
    added = (
        "pack 'patching-pack' adds the schedulers airlock_beta57 to ComfyUI's own lists when "
        "it is imported; isolated, it does so in its own worker only"
    )
    assert added in log, log[-3000:]
    schedulers = ui.object_info("KSampler")["KSampler"]["input"]["required"]["scheduler"][0]
    assert "beta" in schedulers and "airlock_beta57" not in schedulers
    prompt = {"1": {"class_type": "PatchingPackEcho", "inputs": {"text": "x"}}}
    prompt["2"] = {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}}
    assert ui.run(prompt)["status"]["status_str"] == "success"

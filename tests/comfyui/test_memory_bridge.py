"""The memory bridge against the REAL upstream ``comfy.model_management`` of ComfyUI 0.30.0,
with a real worker and the simulated GPU. Each scenario runs in a fresh process
(``bridge_scenarios.py``), because upstream's ledger is module state."""

from __future__ import annotations

from pathlib import Path

import pytest

from .scenario_run import ScenarioFailed, run_scenario

MIB = 1024 * 1024
GIB = 1024 * MIB


def run(scenario: str, comfyui_dir: Path) -> dict:
    try:
        return run_scenario("bridge_scenarios.py", [scenario], comfyui_dir)
    except ScenarioFailed as e:
        pytest.fail(str(e))


def test_free_memory_evicts_what_in_process_comfyui_would(comfyui_dir):
    r = run("order", comfyui_dir)
    # Same models, same ledger order, same victims: upstream's sort (most offloaded first,
    # then refcount, size, newest) and its re-measure after each unload.
    assert r["ours_before"] == r["ref_before"] == ["D", "C", "B", "A"]
    assert r["ours"] == r["ref"] == ["B", "D"]
    # The worker really freed them (its residency and the card), and nothing more.
    assert r["worker_after"] == {"A": 8 * MIB, "B": 0, "C": 16 * MIB, "D": 0}
    assert r["used_after"] == r["ref_used_after"] == 24 * MIB


def test_partial_unload_keeps_the_entry_and_a_short_one_escalates(comfyui_dir):
    r = run("partial", comfyui_dir)
    assert r["partial_unloaded"] == []  # freed enough: the entry stays
    assert r["partial_ledger"] == ["A"]
    assert r["partial_resident"] == 12 * MIB
    assert r["standin_loaded"] == [12 * MIB]
    # While a node runs with A, B (which the node does not use) is evictable: 2 MiB asked,
    # whole parts of 2 MiB freed.
    assert r["idle_freed_while_busy"] == 2 * MIB
    assert r["idle_loaded_while_busy"] == 6 * MIB
    # In use by the running node: refused, so upstream detaches and pops it...
    assert r["busy_unloaded"] == ["A"] and r["busy_ledger"] == ["B"]
    # ...but the worker still holds it (using() loaded it back in full), and the next report
    # puts it back.
    assert r["busy_resident"] == 16 * MIB
    assert r["after_report_ledger"] == ["A", "B"]


def test_rerequested_standin_is_not_unloaded(comfyui_dir):
    r = run("rerequest", comfyui_dir)
    assert r["ledger"][0] == "A"  # re-inserted at the front
    new = r["commands_after"][len(r["commands_before"]) :]
    # detach(unpatch_all=False) sent nothing; the load asked for 1e32 and moved 0 bytes.
    assert [c[1] for c in new] == ["partially_load"]
    assert new[0][2] == 1e32 and new[0][3] == 0
    assert r["residency"] == {"A": 8 * MIB, "B": 8 * MIB}


def test_loaded_models_currently_used_leaves_worker_models_alone(comfyui_dir):
    r = run("currently_used", comfyui_dir)
    # Stand-ins register with currently_used False (seed row 38): upstream's controlnet pattern
    # reloads the host's model it just used, never a worker's partly offloaded one.
    assert r["used"] == ["H"], r
    assert r["all"] == ["A", "H"], r
    assert r["flags"] == {"A": False, "H": True}, r
    assert r["commands_after"] == r["commands_before"], r
    assert r["residency"] == {"A": 4 * MIB}, r


def test_a_packs_own_module_is_seen_evicted_and_put_back(comfyui_dir):
    r = run("pack_module", comfyui_dir)
    net = 8 * MIB
    assert r["device"] == "cpu"  # the worker mirrors the host's --cpu
    assert r["made"] == [["OwnNet", net, "cpu"]], r
    # The Free button: upstream detached it, the worker unloaded it (on the CPU nothing
    # moves: it leaves the ledger), and the worker still knows it.
    assert r["freed"] == [], r
    assert r["worker_freed"] == [["OwnNet", "module", 0]], r
    # The pack's next node, using it as loaded once: back in full, and in the ledger.
    assert r["ran"] == 0.0
    assert r["after_run"] == [["OwnNet", net, "cpu"]], r
    # The pack's own .to() after another Free: the ledger follows it.
    assert r["after_move"] == [["OwnNet", net, "cpu"]], r
    assert r["after_drop"] == [], r
    assert r["half_to"] == [["OwnNet", "module", net // 2]], r
    assert r["state_dict"] == [["OwnNet", "module", net]], r
    assert r["submodule_then_whole"] == [["OwnNet", "module", net]], r
    # A ComfyUI model's modules move under ComfyUI's loader: one patcher row, no module.
    assert [k for _, k, _ in r["patcher"]] == ["patcher"], r


def test_an_evicted_module_comes_back_through_admission(comfyui_dir):
    r = run("comes_back", comfyui_dir)
    gone = 16 * MIB - r["residency_evicted"]["A"]
    assert gone > 0, r  # the host's free_memory took some of A
    # Asked as upstream's load_models_gpu asks: 1.1 x the bytes + 0.8 GiB + its 400 MiB reserve.
    [(topic, device, need, granted)] = r["asked"]
    assert (topic, device, granted) == ("admit?", "cuda:0", True), r
    assert abs(need - (gone * 1.1 + 0.8 * GIB + 400 * MIB)) <= 1, (need, gone)
    assert r["residency"]["A"] == 16 * MIB, r
    assert "A" in r["listed"], r
    assert r["ledger"]["A"] == 16 * MIB, r
    assert r["card"] == sum(r["residency"].values()), r


def test_unload_all_models_releases_worker_models(comfyui_dir):
    r = run("unload_all", comfyui_dir)
    assert r["used_before"] == 24 * MIB
    assert r["used_after"] == 0
    assert r["ledger"] == []
    assert r["residency"] == {"A": 0, "B": 0}


def test_models_loaded_through_the_workers_own_load_models_gpu(comfyui_dir):
    r = run("patcher", comfyui_dir)
    assert r["loaded"] == 4 * MIB
    assert r["worker_before"] == [["Linear", 4 * MIB]]
    assert r["host_before"] == [["cpu", "Linear", 4 * MIB]]
    assert r["host_after"] == []  # upstream detached and popped the stand-in...
    assert r["worker_after"] == []  # ...and the worker's own upstream unloaded the model
    assert r["host_after_report"] == []


def test_a_packs_unload_all_models_empties_comfyuis_ledger_too(comfyui_dir):
    r = run("pack_unload_all", comfyui_dir)
    assert r["worker_before"] == [["Linear", 4 * MIB]]
    assert len(r["host_before"]) == 2, r  # ComfyUI's own patcher and the worker's stand-in
    assert r["worker_in_call"] == []  # the worker's own upstream code unloaded its model...
    assert r["host_after"] == [], r  # ...and ComfyUI's unload_all_models() ran too (ADR 0052)
    assert r["worker_after"] == []


def test_killed_worker_leaves_the_ledger_and_stale_commands_never_arrive(comfyui_dir):
    r = run("killed", comfyui_dir)
    assert r["error"] is None
    assert r["generations"][1] == r["generations"][0] + 1
    assert r["ledger"] == ["A2"]
    assert r["ledger_generations"] == [r["generations"][1]]
    assert r["residency"] == {"A2": 8 * MIB}  # the stale detach did not reach model id 1

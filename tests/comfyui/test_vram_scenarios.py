"""The memory bridge with upstream in NORMAL_VRAM, LOW_VRAM and NO_VRAM rather than ``--cpu``'s
DISABLED (vram_scenarios.py): upstream's partial-load budgets and its 0.1 sentinel run against
the stand-ins. The card, the host's CUDA queries (vram_host.py) and the workers' models are
simulated; upstream's ``comfy.model_management`` (ComfyUI 0.30.0) is real. One fresh process
per run, two at a time."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from .scenario_run import ScenarioFailed, run_scenario

GIB = 1 << 30
MIB = 1 << 20
RUNS = [
    ("module_comes_back", "normal", "device_wide"),
    ("module_comes_back", "normal", "wddm"),
    ("module_comes_back", "low", "device_wide"),
    ("module_comes_back", "low", "wddm"),
    ("busy_partial", "normal", "device_wide"),
    ("busy_partial", "normal", "wddm"),
    ("sentinel", "no", "device_wide"),
    ("reserve", "normal", "device_wide"),
    ("reserve", "normal", "wddm"),
    ("smart_off", "normal", "device_wide"),
    ("smart_off", "normal", "wddm"),
]
STATE = {"normal": "NORMAL_VRAM", "low": "LOW_VRAM", "no": "NO_VRAM"}
# Upstream's flags per scenario (scenario_host.py sets them before upstream reads them).
FLAGS = {"reserve": {"SCENARIO_RESERVE_GIB": "2"}, "smart_off": {"SCENARIO_SMART": "off"}}


def _run(comfyui_dir: Path, scenario: str, vram: str, semantics: str) -> dict:
    env = {"SCENARIO_VRAM": vram, **FLAGS.get(scenario, {})}
    try:
        return run_scenario("vram_scenarios.py", [scenario, semantics], comfyui_dir, env)
    except ScenarioFailed as e:
        return {"error": str(e)}


@pytest.fixture(scope="module")
def results(comfyui_dir):
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {run: pool.submit(_run, comfyui_dir, *run) for run in RUNS}
    return {run: f.result() for run, f in futures.items()}


def _result(results, *run) -> dict:
    r = results[run]
    if "error" in r:
        pytest.fail(r["error"])
    assert r["vram_state"] == STATE[run[1]], r["vram_state"]
    return r


def _truthful(step: dict) -> None:
    """The ledger is the card's truth: each model the worker holds has its bytes in the
    ledger and one entry in upstream's list, the card books exactly those bytes for it, and
    nothing is past the card."""
    held = {k: v for k, v in step["residency"].items() if v > 0}
    assert step["ledger"] == held, step
    assert step["listed"] == sorted(held), step
    assert step["card_worker"] == sum(held.values()), step
    assert step["overcommitted"] == 0 and step["demotions"] == 0, step


@pytest.mark.parametrize(
    "vram,semantics",
    [("normal", "device_wide"), ("normal", "wddm"), ("low", "device_wide"), ("low", "wddm")],
)
def test_an_evicted_pack_model_comes_back_and_the_ledger_is_the_truth(results, vram, semantics):
    r = _result(results, "module_comes_back", vram, semantics)
    made, loaded, ran = r["steps"]
    for step in r["steps"]:
        _truthful(step)
    # Upstream's free_memory took the worker's model (in whole parts) for its own load...
    assert made["residency"]["W"] == 4 * GIB
    assert loaded["residency"]["W"] < 4 * GIB and loaded["host"] > 0
    # ...and the pack's next node got it back, admitted by the host for what was gone as
    # upstream's load_models_gpu asks for a load: 1.1 x bytes + 0.8 GiB + its 400 MiB reserve.
    gone = 4 * GIB - loaded["residency"]["W"]
    [(topic, need, granted)] = r["asked"]
    assert topic == "admit?" and granted is True, r["asked"]
    assert abs(need - (gone * 1.1 + 0.8 * GIB + 400 * MIB)) <= 1, (need, gone)
    assert ran["residency"]["W"] == 4 * GIB


@pytest.mark.parametrize("vram,semantics", [("normal", "device_wide"), ("normal", "wddm")])
def test_a_busy_model_stays_and_upstream_loads_its_own_in_part(results, vram, semantics):
    r = _result(results, "busy_partial", vram, semantics)
    made, done = r["steps"]
    _truthful(made)
    _truthful(done)
    # The model the running node used was never taken; the idle one was.
    assert done["residency"]["A"] == 6 * GIB
    assert done["residency"]["B"] < 4 * GIB
    # Upstream loaded its own model with the budget its VRAM state allowed: in part, and
    # nothing past the card while the node ran (under --cpu it would load all 10 GiB).
    assert 0 < r["during"]["host"] < 10 * GIB, r["during"]
    assert r["during"]["overcommitted"] == 0 and r["during"]["demotions"] == 0


def test_the_novram_sentinel_reaches_the_worker_and_moves_nothing(results):
    r = _result(results, "sentinel", "no", "device_wide")
    assert r["commands"] == [["partially_load", 0.1, 0]], r["commands"]
    assert r["residency"] == {"X": GIB // 2}
    assert r["card_worker"] == GIB // 2 and r["overcommitted"] == 0


@pytest.mark.parametrize("semantics", ["device_wide", "wddm"])
def test_reserve_vram_stays_free_when_a_pack_model_comes_back(results, semantics):
    """``--reserve-vram 2``: upstream's own load and the pack's model coming back both leave
    the reserve and upstream's room to run (0.8 GiB) free on the card."""
    r = _result(results, "reserve", "normal", semantics)
    made, loaded, ran = r["steps"]
    for step in r["steps"]:
        _truthful(step)
    keep = 2 * GIB + 0.8 * GIB
    assert r["host_minimum"] >= keep, r["host_minimum"]
    # Upstream asked for its reserve too: it took part of W although 12 GiB were free for 10.
    assert made["residency"]["W"] == 4 * GIB
    # (Device-wide it loads all 10 GiB; on WDDM its blind view, corrected by the reserve term,
    # may give its own model a smaller budget: upstream's decision, nothing past the card.)
    assert 0 < loaded["residency"]["W"] < 4 * GIB and loaded["host"] > 0, loaded
    if semantics == "device_wide":
        assert loaded["host"] == 10 * GIB, loaded
    gone = 4 * GIB - loaded["residency"]["W"]
    # The worker asked with upstream's formula, and the host made that room from its own model.
    [(topic, need, granted)] = r["asked"]
    assert topic == "admit?" and granted is True, r["asked"]
    assert abs(need - (gone * 1.1 + keep)) <= 1, (need, gone)
    assert ran["residency"]["W"] == 4 * GIB, ran
    if semantics == "device_wide":  # 4 GiB free for a 5 GiB ask: the host's model gave room
        assert ran["host"] < loaded["host"], ran
    assert all(free >= keep for free in r["free"]), r["free"]


@pytest.mark.parametrize("semantics", ["device_wide", "wddm"])
def test_disable_smart_memory_unloads_pack_models_on_each_load_and_after_the_prompt(
    results, semantics
):
    r = _result(results, "smart_off", "normal", semantics)
    assert r["smart_off"] is True
    made, loaded, ran, done = r["steps"]
    for step in r["steps"]:
        _truthful(step)
    assert made["residency"]["W"] == 4 * GIB
    # Room to spare, and upstream unloaded the worker's model whole all the same.
    assert loaded["residency"]["W"] == 0 and loaded["host"] == GIB, loaded
    assert ran["residency"]["W"] == 4 * GIB, ran
    # execution.py's unload_all_models() after the prompt reaches the worker's model too.
    assert done["residency"]["W"] == 0 and done["card_worker"] == 0, done

"""The acceptance scenarios for admission and the reserve, on both semantics of the simulated
card, with the REAL upstream ``comfy.model_management`` (ComfyUI 0.30.0) and real worker
processes (``wddm_scenarios.py``; the figures are in docs/memory.md).

Every run is a fresh process (upstream's ledger is module state); the eight runs start together
at the first test, three at a time, and take about a minute and a half on two busy cores (each
spends most of its time importing ComfyUI and torch, in the host and in its workers).
"""

from __future__ import annotations

import ast
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from .scenario_run import ScenarioFailed, run_scenario

GIB = 1 << 30

# The module's fixture runs every scenario (three at a time), each worker loading ComfyUI's
# nodes first as ComfyUI does: about 220 s on an idle 2-core machine, inside the first test's
# timeout.
pytestmark = pytest.mark.timeout(900)

RUNS = [
    ("headline", "wddm", "off"),
    ("headline", "wddm", "on"),
    ("headline", "device_wide", "on"),
    ("headline_small", "wddm", "on"),
    ("admission", "wddm", "on"),
    ("admission", "device_wide", "on"),
    ("contention", "wddm", "on"),
    ("contention", "device_wide", "on"),
    ("oom", "wddm", "on"),
    ("oom", "device_wide", "on"),
    ("idle", "wddm", "on"),
    ("idle", "device_wide", "on"),
    ("holds", "device_wide", "on"),
    ("mismatch", "device_wide", "on"),
    ("floor", "wddm", "on"),
    ("floor", "device_wide", "on"),
]


def run(scenario: str, semantics: str, reserve: str, comfyui_dir: Path, nvml: Path) -> dict:
    # Host and workers read NVML from the fake library, which reports the simulated card.
    env = {"AIRLOCK_RESERVE": reserve, "AIRLOCK_NVML_LIBRARY": str(nvml)}
    try:
        return run_scenario("wddm_scenarios.py", [scenario, semantics], comfyui_dir, env, 600)
    except ScenarioFailed as e:
        return {"error": f"reserve={reserve}: {e}"}  # raised by the test that reads it


@pytest.fixture(scope="module")
def results(comfyui_dir, fake_nvml):
    # The scenario runs build the memory pack's environment once (the first run's worker);
    # running them side by side is safe because the builder locks the environment.
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {key: pool.submit(run, *key, comfyui_dir, fake_nvml) for key in RUNS}
    return {key: f.result() for key, f in futures.items()}


def result(results, *key):
    r = results[key]
    if "error" in r:
        pytest.fail(r["error"])
    return r


# --- a. the seed's headline -------------------------------------------------------------------


def test_headline_without_the_reserve_over_admits_on_wddm(results):
    r = result(results, "headline", "wddm", "off")
    # The host reads 16 GiB free (blind to the worker's 12 GiB), evicts nothing, and loads
    # 6 GiB into 4: the worker's memory is demoted, as the seed measured on Windows.
    assert r["before"]["host_view"] == 16 * GIB and r["before"]["true_free"] == 4 * GIB
    assert r["evicted"] == 0
    assert r["host_resident"] == 6 * GIB
    assert r["after"]["demotions"]["count"] > 0
    assert r["worker_demotions"]["bytes"] == 2 * GIB
    assert r["after"]["reserve"] == r["before"]["reserve"] == r["base_reserve"]


def test_headline_with_the_reserve_admits_exactly_on_wddm(results):
    r = result(results, "headline", "wddm", "on")
    before, after = r["before"], r["after"]
    # The published reserve is the change of variables: base + (blind - true).
    assert before["reserve"] == r["base_reserve"] + before["host_view"] - before["true_free"]
    assert r["host_resident"] == 6 * GIB
    assert after["demotions"] == {"count": 0, "bytes": 0}
    assert r["peak_overcommitted"] == 0 and after["overcommitted"] == 0
    # Eviction stops at the minimum: at least the shortfall, within one model of it.
    assert r["optimal_evicted"] <= r["evicted"] <= r["optimal_evicted"] + r["largest_model"]


def test_headline_on_device_wide_needs_no_reserve(results):
    r = result(results, "headline", "device_wide", "on")
    assert r["before"]["host_view"] == r["before"]["true_free"] == 4 * GIB
    assert r["host_resident"] == 6 * GIB
    assert r["peak_overcommitted"] == 0 and r["after"]["overcommitted"] == 0
    assert r["optimal_evicted"] <= r["evicted"] <= r["optimal_evicted"] + r["largest_model"]
    # Nothing is added to the reserve where the reading is device-wide.
    assert r["before"]["reserve"] == r["after"]["reserve"] == r["base_reserve"]


def test_headline_with_small_worker_models_never_over_admits(results):
    """Worker models smaller than upstream's request: upstream detaches each whole without
    saying how much it wants (``model_unload`` calls ``detach(True)``), and its blind reading
    never moves, so each such stand-in unloads whole (docs/adr/0030: nothing reads upstream's
    frames). More is evicted than the truth lacks; nothing is over-admitted, and the ledger
    holds exactly what the worker holds. (WDDM: the Linux product never runs this path.)"""
    r = result(results, "headline_small", "wddm", "on")
    assert r["after"]["demotions"] == {"count": 0, "bytes": 0}
    assert r["peak_overcommitted"] == 0
    assert r["host_resident"] == 6 * GIB
    assert r["optimal_evicted"] <= r["evicted"]
    assert r["popped_kept"] == [], "a model upstream detached is still held by the worker"
    held = {k: v for k, v in r["worker_residency"].items() if v > 0}
    assert r["ledger_after_heartbeat"] == held


@pytest.mark.xfail(
    strict=True,
    reason="ADR 0030: detach(True) carries no amount and the stand-in reads none from upstream's "
    "frames, so on a blind platform every worker model smaller than upstream's request is "
    "evicted whole (the Linux product never takes this path)",
)
def test_headline_with_small_worker_models_evicts_at_most_one_model_more(results):
    r = result(results, "headline_small", "wddm", "on")
    assert r["evicted"] <= r["optimal_evicted"] + r["largest_model"], r["evicted"]


# --- b. a worker load admitted by the host ----------------------------------------------------


@pytest.mark.parametrize("semantics", ["wddm", "device_wide"])
def test_a_worker_load_is_admitted_by_policy(results, semantics):
    r = result(results, "admission", semantics, "on")
    a = r["admission"]
    assert a["granted"] and a["free"] >= a["need"]
    # Phase one: the idle worker's models (least recently used first), then the busy worker's
    # free one, then the requester's own; never the one B's running node uses.
    assert [s["name"] for s in r["steps"]] == ["c1", "c2", "b2", "a0"]
    assert all(s["refused"] is None for s in r["steps"])
    assert r["residency"]["B"]["b1"] == 2 * GIB
    assert r["residency"]["C"] == {"c1": 0, "c2": 0}
    assert r["residency"]["A"]["a0"] == 0 and r["residency"]["B"]["b2"] == 0
    # Phase two: the residual from the host's own model, through upstream, and no more than a
    # part of it past the residual.
    residual = a["need"] - (r["before"]["true_free"] + 8 * GIB)
    host_freed = 4 * GIB - r["host_resident"]
    assert residual <= host_freed < residual + GIB
    # The load fits: the worker loaded all of it, and nobody was demoted or overcommitted.
    assert r["loaded"] == r["fakes"]["P"] == 10 * GIB
    assert r["after"]["demotions"] == {"count": 0, "bytes": 0}
    assert r["peak_overcommitted"] == 0 and r["after"]["overcommitted"] == 0
    assert [q["topic"] for q in r["asked"]] == ["admit?"]


# --- c. two workers and the host contending ---------------------------------------------------


def policy_order(candidates: list[dict], requester: str, loading: str) -> list[str]:
    """The eviction order the policy prescribes, from the scenario's own record (the rounds run
    one at a time, so the other worker is idle): the other worker's models before the
    requester's, least recently used first; never the model being loaded."""
    evictable = [c for c in candidates if c["resident"] > 0 and c["name"] != loading]
    evictable.sort(key=lambda c: (c["owner"] == requester, c["round"], c["owner"], c["model"]))
    return [c["name"] for c in evictable]


@pytest.mark.parametrize("semantics", ["wddm", "device_wide"])
def test_two_workers_and_the_host_contending(results, semantics):
    r = result(results, "contention", semantics, "on")
    rounds = r["rounds"]
    assert len(rounds) == 50
    worker_loads = [x for x in rounds if x["actor"] != "host"]
    assert worker_loads and any(x["actor"] == "host" for x in rounds)
    for x in rounds:
        # Every load admitted and whole; nobody demoted, nothing past the card.
        assert x["resident"] == x["size"], x
        assert x["demoted"] == 0 and x["overcommitted"] == 0, x
        for a in x["admissions"]:
            assert a["granted"], x
            assert all(s["refused"] is None for s in a["steps"]), x
            names = [s["name"] for s in a["steps"]]
            expected = policy_order(a["candidates"], x["actor"], x["model"])
            assert names == expected[: len(names)], x
    assert any(a["steps"] for x in worker_loads for a in x["admissions"])
    assert r["demotions"] == {"count": 0, "bytes": 0}
    assert r["peak_overcommitted"] == 0
    # The ledger is the truth: per process, upstream's entries (stand-ins and the host's own
    # models), the bridge's stand-ins and each worker's own ledger equal the card's bookings.
    assert r["ledger"] == r["truth"]
    for w in ("W1", "W2"):
        assert r["standins"][w] == r["worker_ledgers"][w] == r["truth"][w]
    # Every admission's hold was given back once its load was done (the worker's ``loaded``),
    # so none counted a finished load twice.
    assert r["arbiter"]["holds"] == 0 and r["arbiter"]["held_bytes"] == 0, r["arbiter"]
    assert r["arbiter"]["satisfied"] >= len(worker_loads)


# --- the premise of the stand-in's translation ----------------------------------------------


def test_upstream_asks_to_free_only_with_the_reserve_inside_or_everything(comfyui_dir):
    """Tripwire for host/reserve.py's translation of upstream's requests to a stand-in
    (``n - unseen``): it is exact only if every upstream request to ``free_memory`` carries
    ``extra_reserved_memory()`` once (the loads) or asks for everything (``1e30``). A new caller
    of another kind would be under-served on WDDM: re-derive the translation first."""
    allowed = {
        "total_memory_required[device] * 1.1 + extra_mem",
        "minimum_memory_required",
        "1e+30",
    }
    found = set()
    for path in comfyui_dir.rglob("*.py"):
        text = path.read_text(errors="replace")
        if "free_memory(" not in text or "/tests" in str(path.relative_to(comfyui_dir)):
            continue
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            f = node.func
            direct = isinstance(f, ast.Name) and f.id == "free_memory"
            via = isinstance(f, ast.Attribute) and f.attr == "free_memory"
            if direct or (via and ast.unparse(f.value).endswith("model_management")):
                found.add(ast.unparse(node.args[0]))
    assert found and found <= allowed, f"upstream now asks free_memory for {found - allowed}"
    tree = ast.parse((comfyui_dir / "comfy" / "model_management.py").read_text())
    load = next(
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "load_models_gpu"
    )
    assigned: dict[str, list[str]] = {}
    for n in ast.walk(load):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    assigned.setdefault(t.id, []).append(ast.unparse(n.value))
    # extra_mem = max(inference_memory, memory_required + extra_reserved_memory()), and the
    # minimum is extra_mem or the same form: the reserve exactly once.
    for name in ("extra_mem", "minimum_memory_required"):
        for value in assigned[name]:
            once = value.count("extra_reserved_memory()") == 1 and "inference_memory" in value
            assert once or value == "extra_mem", f"load_models_gpu's {name} is now {value!r}"


# --- d. a worker's out-of-memory: the host makes room, the worker retries once ----------------


@pytest.mark.parametrize("semantics", ["wddm", "device_wide"])
def test_a_worker_oom_is_retried_once_after_the_host_makes_room(results, semantics):
    r = result(results, "oom", semantics, "on")
    # Admitted with room to spare; another process then took it, so the load ran out of
    # memory; the worker asked again and the host evicted idle worker B's model, stopping at
    # the minimum (3 parts of 1 GiB for a 2.6 GiB shortfall), and the one retry fit.
    assert r["asked"] == ["admit?", "oom?"], r
    admit, oom = r["answers"]
    assert admit["freed"] == 0 and oom["granted"], r
    assert oom["freed"] == 3 * GIB, r
    assert r["b_resident"] == 3 * GIB, r
    assert r["resident"] == 4 * GIB, r
    assert r["after"]["overcommitted"] == 0, r
    assert r["after"]["demotions"]["count"] == 0, r


# --- e. idle workers give memory back: on time, and under pressure ---------------------------


@pytest.mark.parametrize("semantics", ["wddm", "device_wide"])
def test_idle_workers_release_on_time_and_under_pressure(results, semantics):
    r = result(results, "idle", semantics, "on")
    # On time: the idle worker's model left the card; the busy worker kept the one its
    # running node uses.
    assert r["timed"] == {"B": 0, "A": 2 * GIB}, r
    assert any("b0" in m for m in r["timed_released"]), r
    # Under pressure: from 8 GiB free to the 13 GiB floor, least recently used first, and no
    # more than one part (512 MiB) past it, even after more heartbeats.
    assert r["pressure_before"] == 8 * GIB, r
    assert 13 * GIB <= r["pressure_after"] < 13 * GIB + GIB // 2, r
    order = [x["model"] for x in r["pressure_released"]]
    assert order[:2] == ["A#1", "A#2"], order
    assert r["residency"]["B"]["b2"] == 2 * GIB, "the most recently used model stays"


# --- the worker's floor ---------------------------------------------------------------------


def test_a_workers_floor_is_measured_once_after_its_context_exists(results):
    r = result(results, "floor", "device_wide", "on")
    assert r["before_context"] is None  # no context yet: unknown, not 0
    assert r["after_context"] == r["context"]
    assert r["after_models"] == r["context"]  # measured once: the models do not move it
    assert r["host_sees"] == r["context"]
    assert r["booked"] == r["after_models"] + r["models_resident"]
    assert r["models_resident"] == 3 * GIB


def test_a_workers_floor_stays_unmeasured_where_nvml_has_no_per_process_memory(results):
    r = result(results, "floor", "wddm", "on")
    assert r["before_context"] is None and r["after_models"] is None and r["host_sees"] is None
    assert r["booked"] == r["context"] + r["models_resident"]


# --- admission holds ------------------------------------------------------------------------


def test_an_admission_hold_is_given_back_when_its_load_is_done(results):
    r = result(results, "holds", "device_wide", "on")
    # The worker loaded ComfyUI's nodes before the pack (as ComfyUI does before any custom
    # node), so ComfyUI's model management was there before the node ran. A first import
    # inside a node is only possible in an env without ComfyUI's requirements; the import
    # hook that covers it is tested there (tests/comfyui/test_interrupts.py, interrupt-late).
    assert r["comfy_before"] is True
    assert r["resident"] == [3 * GIB] * 3
    assert [a["topic"] for a in r["answers"]] == ["admit?"] * 3
    for a in r["answers"]:
        # Each admission held its bytes (a hold id), and found none of the earlier loads of
        # the same node still held: nothing counted twice, nothing evicted.
        assert a["granted"] and a["hold"] is not None and a["held"] == 0 and a["steps"] == 0, r
    assert r["arbiter"]["holds"] == 0 and r["arbiter"]["held_bytes"] == 0
    assert r["free_after"] == 16 * GIB - 4 * GIB - 9 * GIB


# --- device truth by UUID -------------------------------------------------------------------


@pytest.mark.xfail(
    reason="since workers load ComfyUI's nodes first, X's model is not seen booked on the other "
    "card (x_booked_on_other == 0) in a clean-clone run; the refusal itself holds. Open.",
    strict=False,
)
def test_a_worker_on_another_card_is_refused_by_uuid(results):
    r = result(results, "mismatch", "device_wide", "on")
    e = r["refusal"]
    assert e is not None and e["type"] == "DeviceMismatch", r
    assert e["pack"] == "X" and "pack X" in e["message"] and "CUDA_VISIBLE_DEVICES" in e["message"]
    assert e["host_uuid"] == r["card_uuid"] and e["worker_uuid"] == r["other_uuid"]
    # Its model is on the other card, and never in the host's ledger; Y is unaffected.
    assert r["x_booked_on_other"] == 1 << 30
    assert r["ledger"] == ["Y:y0"]
    assert r["mismatched"] == ["X"]

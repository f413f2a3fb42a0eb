"""The RAM budget (host/ram.py, worker/ram.py) with the REAL upstream ``comfy.model_management``
of ComfyUI 0.30.0 in the host and in two real workers; the GPU edge (page-locking, and pinning
being on at all on this CPU-only machine) is simulated as ram_scenarios.py says. One fresh
process (about 25 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .scenario_run import ScenarioFailed, run_scenario

MIB = 1024 * 1024
A, B = "memory-pack", "memory-pack-2"


def run(scenario: str, comfyui_dir: Path) -> dict:
    try:
        return run_scenario("ram_scenarios.py", [scenario], comfyui_dir)
    except ScenarioFailed as e:
        pytest.fail(str(e))


def _consistent(snap: dict) -> None:
    """What the host decided is what each worker's ComfyUI has, and it fits the budget."""
    for name, w in snap["workers"].items():
        # The worker's own ceiling is the host's, and it holds no more than it.
        assert w["max"] == snap["ceilings"][name]
        assert w["total"] <= w["max"]
        # Its pinned bytes reached the host: upstream's running total in that worker.
        assert snap["reported"][name] == w["total"] == sum(w["models"].values())
        assert snap["rss"][name] > 0
        assert snap["status"][name] == {"pinned": w["total"], "pin_ceiling": w["max"]}
    assert snap["host_pinned"] + sum(snap["ceilings"].values()) <= snap["budget"]


def test_the_pin_budget_is_split_and_a_lowered_ceiling_unpins(comfyui_dir):
    r = run("split", comfyui_dir)
    assert r["registered"] == [48 * MIB, 16 * MIB]
    # The budget is upstream's 0.9 applied to the cgroup-aware total, not to each process.
    assert r["first"]["budget"] <= r["upstream_max"][0]

    first = r["first"]
    _consistent(first)
    assert first["reported"] == {A: 48 * MIB, B: 16 * MIB}
    # Room shared: each worker has what it holds plus half of what is left (a raise under
    # RAISE_STEP is not sent, so a ceiling may stay a little lower).
    room = first["budget"] - 64 * MIB
    assert first["ceilings"][A] <= 48 * MIB + room // 2
    assert first["ceilings"][A] >= 48 * MIB + room // 2 - 64 * MIB

    # The host's own pins leave the workers 40 MiB: water-filled, B keeps its 16 MiB, A is cut
    # to 24 MiB and unregistered 24 MiB through upstream's ladder (its newest pins first).
    low = r["lowered"]
    _consistent(low)
    assert low["ceilings"] == {A: 24 * MIB, B: 16 * MIB}
    assert low["workers"][A]["models"] == {"A": 24 * MIB}
    assert low["workers"][B]["models"] == {"B": 16 * MIB}
    assert low["host_pinned"] + sum(low["ceilings"].values()) == low["budget"]
    assert r["settled"]["ceilings"] == low["ceilings"]
    _consistent(r["settled"])

    # The host's cache headroom for a prompt is the worker's before its next call.
    assert r["headroom"] == 3 * 1024 * MIB

    # The host unpins: the ceilings rise again, the pins stay where they are.
    up = r["raised"]
    _consistent(up)
    assert up["ceilings"][A] > 1024 * MIB and up["ceilings"][B] > 1024 * MIB
    assert up["reported"] == {A: 24 * MIB, B: 16 * MIB}
    # The memory status shows the budget and each worker's ceiling.
    ms = r["memory_status"]
    assert ms["ram"]["budget"] == up["budget"]
    assert ms["ram"]["source"] in ("cgroup_v2", "cgroup_v1", "machine")
    assert ms["workers"] == up["ceilings"]
    assert "Pinned RAM: budget" in ms["rendered"]
    assert "memory-pack-2: 16.0 MiB pinned of" in ms["rendered"]

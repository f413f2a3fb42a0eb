"""ComfyUI's cancel (``POST /interrupt``, what the UI's button sends) reaching isolated nodes:
one that checks stops at its next check, one that never checks gets SIGINT, one deaf to SIGINT
is killed, and ComfyUI goes on with the next prompt every time. A pack's ``call-deadline``
stops a node that runs past it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from .harness import ComfyUI, execution_error, make_base_dir

REPO = Path(__file__).resolve().parents[2]
TEST_PACKS = REPO / "tests" / "packs"
AIRLOCK_HOME = Path(os.environ.get("AIRLOCK_TEST_HOME") or REPO / ".cache" / "test-airlock-home")


@pytest.fixture(scope="module")
def server(comfyui_dir, tmp_path_factory):
    base = make_base_dir(
        tmp_path_factory.mktemp("interrupts"),
        custom_nodes={"comfy-airlock": REPO / "custom_node"},
        isolated={
            "interrupt-nodes": TEST_PACKS / "interrupt-nodes",
            "deadline-nodes": TEST_PACKS / "deadline-nodes",
        },
    )
    env = {
        "AIRLOCK_HOME": str(AIRLOCK_HOME),
        "AIRLOCK_INTERRUPT_SIGNAL_S": "0.5",
        "AIRLOCK_INTERRUPT_KILL_S": "1.0",
    }
    ui = ComfyUI(comfyui_dir, base, env=env, startup_timeout=1200, start=False)
    ui.start()
    yield ui
    ui.stop()


def _wait_file(path: Path, timeout: float = 60.0) -> float:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.005)
    time.sleep(0.002)
    return float(path.read_text())


def _worker(ui: ComfyUI) -> dict:
    return {row["pack"]: row for row in ui.get("/airlock/workers")}["interrupt-nodes"]


def _cancel(ui: ComfyUI, node: str, marker: Path) -> tuple[str, float]:
    prompt = {"1": {"class_type": node, "inputs": {"seconds": 120.0, "marker": str(marker)}}}
    pid = ui.queue(prompt)
    _wait_file(marker.with_suffix(".started"), timeout=300)
    time.sleep(0.05)
    sent = time.time()
    ui.post("/interrupt", {})
    ui.wait_message(type="execution_interrupted", prompt_id=pid, timeout=60)
    entry = ui.wait(pid, timeout=60)
    assert entry["status"]["status_str"] == "error"
    return pid, sent


def _pid_now(ui: ComfyUI, salt: int) -> int:
    entry = ui.run({"1": {"class_type": "AirlockPid", "inputs": {"salt": salt}}})
    return int(entry["outputs"]["1"]["text"][0])


def test_post_interrupt_stops_a_node_at_its_next_check(server, tmp_path):
    before = _pid_now(server, 1)
    latencies = []
    for i in range(3):
        marker = tmp_path / f"spin{i}"
        _, sent = _cancel(server, "AirlockSpin", marker)
        stopped = _wait_file(marker.with_suffix(".stopped"), timeout=5)
        latencies.append(stopped - sent)
    print("POST /interrupt to the node's check (ms):", [round(x * 1000, 1) for x in latencies])
    # The node checks every millisecond; the acceptance bound is 100 ms after its next check,
    # measured here from the moment the HTTP request was sent.
    assert min(latencies) < 0.1, latencies
    assert sorted(latencies)[1] < 0.1, latencies
    assert _pid_now(server, 2) == before, "a check-stopped node needs no new worker"


def test_a_node_that_never_checks_is_stopped_by_sigint(server, tmp_path):
    before = _pid_now(server, 3)
    _, sent = _cancel(server, "AirlockSleep", tmp_path / "sleep")
    waited = time.time() - sent
    assert waited < 30, waited
    assert _pid_now(server, 4) == before, "SIGINT stops the node, not the worker"


def test_a_node_deaf_to_sigint_is_killed_and_comfyui_goes_on(server, tmp_path):
    before = _pid_now(server, 5)
    generation = _worker(server)["generation"]
    _cancel(server, "AirlockDeaf", tmp_path / "deaf")
    after = _pid_now(server, 6)
    assert after != before
    assert _worker(server)["generation"] == generation + 1
    assert "was interrupted" in server.log_text()


def test_a_node_past_its_packs_call_deadline_fails_the_prompt(server):
    slow = {"1": {"class_type": "AirlockSlowNode", "inputs": {"seconds": 60.0}}}
    t0 = time.monotonic()
    entry = server.run(slow, timeout=60, check=False)
    took = time.monotonic() - t0
    err = execution_error(entry)
    assert err is not None, entry
    assert "DeadlineExceeded" in err["exception_type"], err
    assert "deadline of 1.5 s" in err["exception_message"], err
    assert took < 30, took
    fast = {"1": {"class_type": "AirlockSlowNode", "inputs": {"seconds": 0.1}}}
    assert server.run(fast)["outputs"]["1"]["text"] == ["slept 0.1"]

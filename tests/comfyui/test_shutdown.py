"""Stopping ComfyUI with isolated packs, as a user does: Ctrl-C (SIGINT to the terminal's
process group) or a service manager's SIGTERM (to ComfyUI's pid alone), with the pack's worker
idle or running a node. Native ComfyUI exits at once; so must it with workers, and leave
nothing behind: no worker process (nor anything in its process group), no handshake socket
directory, no worker temp dir, no shared-memory segment held by anyone.

Each case measures, from the signal, when the worker is gone and when ComfyUI is, and prints
both (``pytest -s``). The worker must be gone, and nothing left, within 2 s. After SIGTERM
ComfyUI dies at once (the default action, as natively), so it is held to 2 s too. After SIGINT
ComfyUI runs its interpreter's finalization, which alone takes upstream ComfyUI 7-16 s on a
loaded 2-core machine (full garbage collections in CPython's ``Py_FinalizeEx``, about 3 CPU
seconds; bench/shutdown.py, docs/benchmarks.md); what comfy-airlock adds to it, stopping the
workers at exit, must take at most 1.5 s (its own log line says how long), and ComfyUI must
exit.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from .harness import ComfyUI, make_base_dir

REPO = Path(__file__).resolve().parents[2]
TEST_PACKS = REPO / "tests" / "packs"
AIRLOCK_HOME = Path(os.environ.get("AIRLOCK_TEST_HOME") or REPO / ".cache" / "test-airlock-home")

EXIT_BOUND_S = 2.0


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has exited
    except OSError:
        return True


def _in_group(pgid: int) -> list[int]:
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(d))
    return found


def _memfd_holders(names: tuple[str, ...]) -> list[str]:
    """Every process that has open or mapped a memfd whose name starts with one of ``names``."""
    held = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        targets = []
        try:
            for fd in os.listdir(f"/proc/{d}/fd"):
                with contextlib.suppress(OSError):
                    targets.append(os.readlink(f"/proc/{d}/fd/{fd}"))
            with open(f"/proc/{d}/maps") as f:
                targets += [line.split(maxsplit=5)[-1] for line in f if "/memfd:" in line]
        except OSError:
            continue
        for t in targets:
            name = t.strip().removeprefix("/memfd:")
            if name.startswith(names):
                held.append(f"pid {d}: {name}")
    return held


def _leftover_dirs(host_pid: int) -> list[str]:
    """The host's handshake socket dirs (``airlock-<pid>-*``) and its workers' temp dirs
    (``airlock-tmp-<pid>-*``), wherever the core puts them."""
    bases = {tempfile.gettempdir(), "/tmp", os.environ.get("XDG_RUNTIME_DIR") or "/tmp"}
    prefixes = (f"airlock-{host_pid}-", f"airlock-tmp-{host_pid}-")
    return [
        os.path.join(b, d)
        for b in bases
        if os.path.isdir(b)
        for d in os.listdir(b)
        if d.startswith(prefixes)
    ]


def _worker_row(ui: ComfyUI, pack: str) -> dict:
    return {row["pack"]: row for row in ui.get("/airlock/workers")}[pack]


def _wait_file(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "mid-node"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_comfyui_with_workers_stops_at_once_and_leaves_nothing(start_comfyui, tmp_path, sig, busy):
    # A name of its own, so that no other test's segments are taken for this worker's.
    pack = f"stop-{uuid.uuid4().hex[:8]}"
    base = make_base_dir(
        tmp_path,
        custom_nodes={"comfy-airlock": REPO / "custom_node"},
        isolated={pack: TEST_PACKS / "interrupt-nodes"},
    )
    ui = start_comfyui(base, env={"AIRLOCK_HOME": str(AIRLOCK_HOME)}, startup_timeout=1200)
    marker = tmp_path / "sleep"
    if busy:
        # Never checks for a cancel: a node blocked in C code, the hardest to stop.
        node = {"class_type": "AirlockSleep", "inputs": {"seconds": 120.0, "marker": str(marker)}}
        ui.queue({"1": node})
        _wait_file(marker.with_suffix(".started"), timeout=300)
    else:
        salt = uuid.uuid4().int % 10**6
        ui.run({"1": {"class_type": "AirlockPid", "inputs": {"salt": salt}}}, timeout=300)
    row = _worker_row(ui, pack)
    assert row["state"] == "running", row
    worker, host = row["pid"], ui.proc.pid
    assert not _gone(worker)

    t0 = time.monotonic()
    if sig == signal.SIGINT:
        os.killpg(host, sig)  # what Ctrl-C in a terminal does
    else:
        os.kill(host, sig)  # what a service manager does
    worker_gone = host_gone = None
    while (worker_gone is None or host_gone is None) and time.monotonic() - t0 < 60:
        now = time.monotonic() - t0
        if worker_gone is None and _gone(worker):
            worker_gone = now
        if host_gone is None and ui.proc.poll() is not None:
            host_gone = now
        time.sleep(0.005)
    case = f"{sig.name} {'mid-node' if busy else 'idle'}"
    print(f"\n{case}: worker gone in {worker_gone} s, ComfyUI exited in {host_gone} s")
    assert host_gone is not None, f"ComfyUI did not exit within 60 s of {sig.name}"
    assert worker_gone is not None, f"worker {worker} still running 60 s after {sig.name}"
    assert worker_gone <= EXIT_BOUND_S, f"{case}: worker gone after {worker_gone:.2f} s"
    if sig == signal.SIGTERM:
        assert host_gone <= EXIT_BOUND_S, f"{case}: ComfyUI exited after {host_gone:.2f} s"
    else:
        stopped = re.search(
            r"\[comfy-airlock\] 1 worker\(s\) stopped in ([0-9.]+) s", ui.log_text()
        )
        assert stopped, f"no stop line in the log\n{ui.log_tail()}"
        print(f"{case}: comfy-airlock's exit handler took {stopped.group(1)} s")
        assert float(stopped.group(1)) <= 1.5

    # What is left may take a moment to clear after the processes (a reaper's last step):
    # poll briefly, then report everything still there.
    deadline = time.monotonic() + 1.0
    while True:
        left = [f"process {p} in the worker's group" for p in _in_group(worker)]
        left += [f"directory {d}" for d in _leftover_dirs(host)]
        left += _memfd_holders((f"airlock-{pack}-", f"airlock-worker-{worker}-"))
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, f"left behind after {sig.name}: {left}"
    if sig == signal.SIGINT:
        assert "Stopped server" in ui.log_text()  # ComfyUI's own way out, not a kill

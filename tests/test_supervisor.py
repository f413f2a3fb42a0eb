"""Worker processes: spawn on other Pythons, crashes, respawn, host death, hostile peers,
logs, shutdown."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
from conftest import HELPERS, evil_python, memfd_count, socket_dirs

import comfy_airlock


@pytest.mark.parametrize("key,version", [("py310", "3.10"), ("py312", "3.12"), ("host", "3.11")])
def test_workers_on_several_pythons(make_worker, key, version):
    w = make_worker(key)
    assert w.generation == 1 and w.pid > 0
    assert w.info()["python"].startswith(version)
    assert w.call("airlock_testpack:versions")["python"].startswith(version)


def test_sigkill_mid_call_fails_fast_and_the_next_call_respawns(make_worker):
    baseline = memfd_count()
    w = make_worker()
    w.call("airlock_testpack:echo", torch.ones(1000))  # segments exist both ways
    pid = w.pid
    killed_at = []

    def killer():
        time.sleep(0.5)
        killed_at.append(time.monotonic())
        os.kill(pid, 9)

    threading.Thread(target=killer).start()
    with pytest.raises(comfy_airlock.WorkerDied) as info:
        w.call("airlock_testpack:sleep", 30, "about to sleep")
    latency = time.monotonic() - killed_at[0]
    e = info.value
    msg = str(e)
    assert f"pid {pid}" in msg and "generation 1" in msg
    assert "SIGKILL" in msg and "airlock_testpack:sleep" in msg
    assert "about to sleep" in msg, "the last stderr lines are part of the error"
    assert e.pid == pid and e.generation == 1
    assert latency < 1.0, f"crash noticed after {latency:.3f} s"

    assert not w.alive
    assert w.call("airlock_testpack:echo", 41) == 41
    assert w.generation == 2 and w.pid != pid
    w.close()
    del w, e, info
    assert memfd_count() == baseline, "segments of the dead generation were released"
    assert socket_dirs() == []


@pytest.mark.parametrize("how,status", [("exit", "exited with status 7"), ("segv", "SIGSEGV")])
def test_worker_exit_during_a_call_names_the_status(make_worker, how, status):
    w = make_worker()
    with pytest.raises(comfy_airlock.WorkerDied, match=status):
        w.call("airlock_testpack:die", how)
    assert w.call("airlock_testpack:echo", 1) == 1


def test_worker_exits_when_the_host_dies(tmp_path):
    script = tmp_path / "host.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, sys
            sys.path.insert(0, {str(HELPERS)!r})
            import comfy_airlock
            w = comfy_airlock.Worker(sys.executable, sys_path=[{str(HELPERS)!r}], name="orphan")
            w.call("airlock_testpack:echo", 1)
            print(w.pid, flush=True)
            w.call("airlock_testpack:sleep", 60) if len(sys.argv) > 1 else None
            os._exit(0)
            """
        )
    )
    for busy in (False, True):
        args = [sys.executable, str(script)] + (["busy"] if busy else [])
        host = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        worker_pid = int(host.stdout.readline())
        if busy:
            time.sleep(0.3)
        host.kill()
        host.wait()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and _running(worker_pid):
            time.sleep(0.02)
        assert not _running(worker_pid), f"worker outlived its host (busy={busy})"


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_malformed_frame_is_rejected_and_the_worker_replaced(tmp_path, monkeypatch):
    # The garbage goes on the socket ahead of the reply; a reply by mail could be taken
    # first, and the garbage refused one call later (ADR 0061): this checks the socket's rule.
    monkeypatch.setenv("AIRLOCK_LANE_MAIL", "off")
    python = evil_python(
        tmp_path,
        """
        import os, stat, sys
        from comfy_airlock import _native, values
        from comfy_airlock.worker import runtime
        link = _native.connect(os.environ["AIRLOCK_SOCKET"], sys.stdin.readline().strip(), "3.11")
        def is_socket(fd):
            try:
                return stat.S_ISSOCK(os.fstat(fd).st_mode)
            except OSError:
                return False
        socks = sorted(fd for fd in map(int, os.listdir("/proc/self/fd")) if is_socket(fd))
        # Waiting in the host's socket, the garbage is what its next call reads.
        os.write(socks[0], b"\\xff\\xff\\xff\\x7f garbage")  # a frame 'of 2 GiB'
        runtime.serve(link)
        """,
    )
    w = comfy_airlock.Worker(python, name="evil-frame", connect_timeout=10)
    try:
        with pytest.raises(comfy_airlock.ProtocolError, match=r"corrupt frame.*exceeds the limit"):
            w.call("builtins:len", ())
        with pytest.raises(comfy_airlock.ProtocolError):
            w.call("builtins:len", ())  # a fresh generation, just as hostile
        assert w.generation == 2
    finally:
        w.close(grace=1)


def test_worker_that_cannot_start_reports_its_stderr(tmp_path):
    python = evil_python(
        tmp_path, "import sys\nprint('no runtime here', file=sys.stderr)\nsys.exit(4)\n"
    )
    with pytest.raises(
        comfy_airlock.SpawnError, match=r"(?s)exited with status 4.*no runtime here"
    ):
        comfy_airlock.Worker(python, name="broken", connect_timeout=10)


def test_missing_interpreter_is_a_clear_error():
    with pytest.raises(comfy_airlock.SpawnError, match=r"not an executable"):
        comfy_airlock.Worker("/nonexistent/python")


def test_logs_stdout_and_stderr_reach_host_logging(make_worker, caplog):
    w = make_worker(name="chatty")
    with caplog.at_level(logging.INFO, logger="comfy_airlock"):
        assert w.call("airlock_testpack:chat", "hi") is True
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and len(caplog.records) < 3:
            time.sleep(0.02)
    lines = {(r.name, r.getMessage()) for r in caplog.records}
    assert ("comfy_airlock.worker.chatty", "[chatty] stdout: hi") in lines
    assert ("comfy_airlock.worker.chatty", "[chatty] stderr: hi") in lines
    assert ("comfy_airlock.worker.chatty", "[chatty/testpack] log: hi\nsecond line") in lines


def test_a_progress_bar_reaches_the_host_as_it_moves_and_closes_whole(make_worker, caplog):
    # tqdm redraws its line with \r: read as lines, the bar came as one line at its end, cut at
    # 64 KiB. Now its newest state comes every 2 s while it moves, and its last state whole.
    w = make_worker(name="bar")
    states = []
    with caplog.at_level(logging.INFO, logger="comfy_airlock"):
        t0 = time.time()  # as a record's ``created``
        call = threading.Thread(target=w.call, args=("airlock_testpack:progress", 2000, 5.0))
        call.start()
        call.join(30)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and not any("2000/2000" in m for _, m in states):
            states = [
                (r.created - t0, r.getMessage())
                for r in caplog.records
                if "download" in r.getMessage()
            ]
            time.sleep(0.05)
    assert states and "2000/2000" in states[-1][1], states
    assert all("\r" not in m and len(m) < 200 for _, m in states), states
    # While it ran (5 s), about one state per 2 s: the first ones before the bar closed.
    moving = [s for s in states[:-1] if "2000/2000" not in s[1]]
    assert 2 <= len(moving) <= 4, states
    assert moving[0][0] < 1.5, states  # the first state came at once, not at the end


def test_control_lane_answers_while_a_call_runs(make_worker):
    w = make_worker()
    t = threading.Thread(target=w.call, args=("airlock_testpack:sleep", 1.5))
    t.start()
    time.sleep(0.3)
    rtt = w.ping(timeout=1.0)
    assert rtt < 1.0
    t.join()


def test_close_is_bounded_and_idempotent(make_worker):
    w = make_worker()
    outcome = []

    def busy():
        try:
            w.call("airlock_testpack:sleep", 30)
        except comfy_airlock.AirlockError as e:
            outcome.append(e)

    t = threading.Thread(target=busy)
    t.start()
    time.sleep(0.3)
    start = time.monotonic()
    status = w.close(grace=0.5)
    assert time.monotonic() - start < 3
    assert "SIGKILL" in status
    t.join(5)
    assert isinstance(outcome[0], comfy_airlock.AirlockError)
    assert w.close() is None
    with pytest.raises(comfy_airlock.AirlockError, match=r"closed"):
        w.call("airlock_testpack:echo", 1)


def test_orderly_close_exits_cleanly(make_worker):
    w = make_worker()
    assert w.call("airlock_testpack:echo", 1) == 1
    assert w.close() == "exited with status 0"

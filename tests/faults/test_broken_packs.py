"""Packs that break their worker: a segfault at import, ``os._exit`` in the middle of a call, a
fork (whose child must neither outlive the worker nor speak on its lanes), and raw garbage on
stdout. After each: a clear error where one is due, the next call succeeds, nothing leaks."""

from __future__ import annotations

import logging
import signal
import time

import pytest

import comfy_airlock
from comfy_airlock import _native

from .chaos import Killer, iterations, wait_dead


def test_segfault_at_import(spawn, fault, leaks):
    run = fault("pack segfaults at import")
    w = spawn()
    w.call("fault_targets:echo", 0)
    leaks.baseline_threads()
    for i in range(iterations(6)):
        with run.iteration(i):
            pid = w.pid
            with pytest.raises(comfy_airlock.WorkerDied) as info:
                w.call("fault_segv_at_import:anything")
            msg = str(info.value)
            assert f"worker '{w.name}'" in msg and f"pid {pid}" in msg, msg
            assert "SIGSEGV" in msg and "fault_segv_at_import:anything" in msg, msg
            assert "about to crash" in msg, "the last words on stderr are in the error"
            run.outcome("WorkerDied SIGSEGV")
            assert w.call("fault_targets:echo", i) == i
            run.check_leaks(i, leaks.check([w]))
    # Preloaded (the way a pack's nodes are imported at start): the spawn itself fails.
    with run.iteration(run.iterations):
        with pytest.raises(comfy_airlock.SpawnError) as info:
            spawn(name="fault-segv-preload", preload=["fault_segv_at_import"])
        msg = str(info.value)
        assert "worker 'fault-segv-preload' could not start" in msg and "SIGSEGV" in msg, msg
        assert "about to crash" in msg, msg
        run.outcome("SpawnError SIGSEGV")
        run.check_leaks(run.iterations, leaks.check([w]))
    run.finish()


def test_os_exit_in_the_middle_of_a_call(spawn, fault, leaks):
    run = fault("pack calls os._exit mid-call")
    w = spawn()
    w.call("fault_targets:echo", 0)
    leaks.baseline_threads()
    for i in range(iterations(20)):
        with run.iteration(i):
            code = run.rng.choice([0, 1, 3, 77, 255])
            words = f"leaving with {code} at iteration {i}"
            pid = w.pid
            with pytest.raises(comfy_airlock.WorkerDied) as info:
                w.call("fault_targets:exit_mid_call", code, run.rng.uniform(0, 0.01), words)
            msg = str(info.value)
            assert f"worker '{w.name}'" in msg and f"pid {pid}" in msg, msg
            assert f"exited with status {code}" in msg and words in msg, msg
            run.outcome(f"WorkerDied status {code}")
            assert w.call("fault_targets:echo", i) == i
            run.check_leaks(i, leaks.check([w]))
    run.finish()


def test_a_pack_that_forks(spawn, fault, leaks):
    run = fault("pack forks (child exits, returns, emits, lingers)")
    w = spawn()
    w.call("fault_targets:echo", 0)
    leaks.baseline_threads()
    modes = ["exit", "return", "emit", "linger"]
    for i in range(iterations(24)):
        mode = modes[i % len(modes)]
        with run.iteration(i):
            w.call("fault_targets:echo", i)  # running, whatever the last iteration left
            pid = w.pid
            forked_before = _native.rejections()["forked_child"]
            if mode == "linger":
                got = w.call("fault_targets:fork", "sleep", 60.0)
            else:
                got = w.call("fault_targets:fork", mode)
            # The parent's answer, never the child's (whatever the child did).
            assert got["from"] == "parent" and got["pid"] == pid, got
            child = got["child"]
            leaks.note_pid(child)
            # The lanes are still in step: several exchanges, each answered in order.
            for k in range(3):
                assert w.call("fault_targets:echo", (i, k)) == (i, k)
            if mode == "return":
                # The child fell into the worker's call loop and was refused the lane there
                # (counted in its own process, so only its exit shows here).
                assert _wait_gone_or_zombie(child), f"child {child} still runs"
                w.call("fault_targets:reap")
            if mode == "linger":
                # The child outlives its call; once the host has noticed its worker's death
                # and started the next generation, it is gone too (the leak check below).
                assert Killer(pid, 0.0, signal.SIGKILL).finish()
                assert wait_dead(w, pid)
                run.outcome("child gone with its worker's generation")
            else:
                run.outcome(f"child {mode}")
            assert _native.rejections()["forked_child"] == forked_before  # host lanes untouched
            assert w.call("fault_targets:echo", i) == i
            run.check_leaks(i, leaks.check([w]))
    run.finish()


def test_a_forked_child_dies_with_its_worker(spawn):
    w = spawn()
    got = w.call("fault_targets:fork", "sleep", 60.0)
    pid, child = got["pid"], got["child"]
    assert Killer(pid, 0.0, signal.SIGKILL).finish()
    assert wait_dead(w, pid)
    assert _wait_gone_or_zombie(child, zombie_ok=False), (
        f"the forked child {child} outlived its worker"
    )


def _wait_gone_or_zombie(pid: int, zombie_ok: bool = True, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if zombie_ok and state == "Z":
            return True
        time.sleep(0.01)
    return False


def test_garbage_on_stdout(spawn, fault, leaks, caplog):
    run = fault("pack writes raw garbage to stdout/stderr")
    w = spawn()
    w.call("fault_targets:echo", 0)
    leaks.baseline_threads()
    with caplog.at_level(logging.INFO, logger="comfy_airlock"):
        for i in range(iterations(12)):
            with run.iteration(i):
                nbytes = run.rng.choice([1, 100, 64 << 10, 1 << 20, 8 << 20])
                fd = run.rng.choice([1, 1, 2])
                lines = i % 2 == 0
                if i == 1:  # at least one endless line, whatever the seed
                    nbytes, fd = 8 << 20, 1
                assert w.call("fault_targets:garbage", i, nbytes, fd, lines) == nbytes
                assert w.call("fault_targets:echo", i) == i
                run.outcome(
                    f"{'stdout' if fd == 1 else 'stderr'} {nbytes} bytes"
                    f"{'' if lines else ', one line'}"
                )
                run.check_leaks(i, leaks.check([w]))
        w.close()
        # The forwarding thread emits a line once it ends: an endless line that no later
        # newline on the same stream ended, at the end of the pipe, which can come after
        # close() has returned. Wait for it here, while INFO records are still captured.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(
            "more bytes of this line dropped" in r.getMessage() for r in caplog.records
        ):
            time.sleep(0.05)
    messages = [r.getMessage() for r in caplog.records]
    with run.iteration(run.iterations):
        # Lines without an end are cut, not buffered whole: a pack cannot make the host
        # hold an unbounded line.
        longest = max(map(len, messages), default=0)
        assert 0 < longest <= 70_000, f"longest forwarded line: {longest} characters"
        assert any("more bytes of this line dropped" in m for m in messages)
    run.finish()

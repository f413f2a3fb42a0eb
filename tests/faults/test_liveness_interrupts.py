"""Faults of the liveness and interrupt work (ADR 0009), looped like the rest of the suite: a
worker frozen mid-call is declared hung and replaced; a node that never checks is stopped by
SIGINT, or killed when it is deaf to it; a call past its deadline is stopped. After each: the
right error, the next call succeeds, no leaks."""

from __future__ import annotations

import os
import signal
import threading

import pytest

import comfy_airlock

from .chaos import iterations


def test_a_frozen_worker_is_declared_hung(spawn, fault, leaks):
    run = fault("hung worker (SIGSTOP mid-call; liveness 0.05 s / grace 0.4 s)")
    w = spawn(liveness=(0.05, 0.4))
    leaks.baseline_threads()
    for i in range(iterations(10)):
        with run.iteration(i):
            pid = w.call("airlock_interrupts:pid")
            delay = run.rng.uniform(0.0, 0.3)
            threading.Timer(delay, os.kill, (pid, signal.SIGSTOP)).start()
            with pytest.raises(comfy_airlock.WorkerDied) as info:
                w.call("airlock_interrupts:sleep", 60.0)
            assert "declared hung" in str(info.value), str(info.value)
            assert f"pid {pid}" in str(info.value)
            run.outcome("declared hung")
            assert w.call("airlock_interrupts:pid") != pid
            del info
            run.check_leaks(i, leaks.check([w]))
    run.finish()


def _interrupt_until(w, ended: threading.Event) -> None:
    while True:
        w.interrupt()
        if ended.wait(0.02):
            return


def test_a_node_that_never_checks_is_stopped(spawn, fault, leaks):
    run = fault("interrupt of a node that never checks (SIGINT 0.1 s, then kill 0.3 s)")
    w = spawn(signal_after=0.1, kill_after=0.3)
    leaks.baseline_threads()
    for i in range(iterations(20)):
        with run.iteration(i):
            first = w.call("airlock_interrupts:pid")
            deaf = run.rng.random() < 0.5
            target = "airlock_interrupts:sleep_deaf" if deaf else "airlock_interrupts:sleep"
            # Worker.interrupt() is a no-op while no call runs, and a call clears the request
            # as it starts: a timer that fired before that (a loaded machine) was lost, and the
            # call slept its 60 s. So it asks again until the call ends.
            ended = threading.Event()
            asker = threading.Timer(run.rng.uniform(0.0, 0.2), _interrupt_until, (w, ended))
            asker.start()
            try:
                with pytest.raises(comfy_airlock.CallInterrupted) as info:
                    w.run(target, (60.0,))
            finally:
                ended.set()
                asker.join()
            if deaf:
                assert info.value.escalation == "kill", str(info.value)
                assert w.call("airlock_interrupts:pid") != first
                run.outcome("deaf to SIGINT: killed, new worker")
            else:
                assert info.value.escalation == "signal", str(info.value)
                assert w.call("airlock_interrupts:pid") == first
                run.outcome("stopped by SIGINT, same worker")
            del info
            run.check_leaks(i, leaks.check([w]))
    run.finish()


def test_a_call_past_its_deadline_is_stopped(spawn, fault, leaks):
    run = fault("call deadline (0.2 s; SIGINT 0.05 s after)")
    w = spawn(signal_after=0.05, kill_after=2.0)
    leaks.baseline_threads()
    for i in range(iterations(10)):
        with run.iteration(i):
            first = w.call("airlock_interrupts:pid")
            with pytest.raises(comfy_airlock.DeadlineExceeded) as info:
                w.run("airlock_interrupts:sleep", (60.0,), deadline=0.2)
            assert "deadline of 0.2 s" in str(info.value)
            assert w.run("airlock_interrupts:pid", deadline=5.0) == first
            run.outcome("stopped at its deadline")
            del info
            run.check_leaks(i, leaks.check([w]))
    run.finish()

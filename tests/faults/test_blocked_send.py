"""A worker that stops reading its call lane must not hold the host in a send.

The worker forges the reply to one call and then stays in C code with SIGINT blocked, reading
nothing more; the next call carries a 4 MiB argument, far more than a socket buffer holds, so
the host's send cannot finish. Every way a call ends must still act while that send waits:
its deadline, ComfyUI's interrupt (the ``interrupted`` callable the custom node passes),
``Worker.interrupt()``, liveness (the worker frozen as well) and ``close()`` from another
thread. The same holds for the host's answer to a question the worker asked and never reads. Before sends were bounded, such a call returned only when something outside killed
the worker: a killer here does that after 30 s, and a case it had to rescue fails."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import comfy_airlock

from .chaos import Killer, iterations

BIG = ["x" * 65536] * 64  # one 4 MiB frame
BOUND = 10.0  # seconds; the cases end in about 1 s


def _stop_reading(w) -> int:
    """Leaves ``w`` stuck in a node that answered with a forged reply; returns its pid."""
    assert w.call("forgeries:forge_reply_then_hang", 600.0) == "forged"
    return w.pid


def _deadline(w, pid):
    with pytest.raises(comfy_airlock.DeadlineExceeded, match=r"deadline of 0\.5 s") as info:
        w.run("fault_targets:echo", (BIG,), deadline=0.5)
    assert info.value.escalation == "kill", str(info.value)


def _comfyui_interrupt(w, pid):
    raised = threading.Event()
    threading.Timer(0.3, raised.set).start()
    with pytest.raises(comfy_airlock.CallInterrupted) as info:
        w.run("fault_targets:echo", (BIG,), interrupted=raised.is_set)
    assert info.value.escalation == "kill", str(info.value)


def _worker_interrupt(w, pid):
    threading.Timer(0.3, w.interrupt).start()
    with pytest.raises(comfy_airlock.CallInterrupted) as info:
        w.run("fault_targets:echo", (BIG,))
    assert info.value.escalation == "kill", str(info.value)


def _liveness(w, pid):
    os.kill(pid, signal.SIGSTOP)  # its control thread stops answering too
    with pytest.raises(comfy_airlock.WorkerDied, match="declared hung"):
        w.call("fault_targets:echo", BIG)


def _close(w, pid):
    took: list[float] = []

    def close():
        start = time.monotonic()
        w.close(grace=0.5)
        took.append(time.monotonic() - start)

    closer = threading.Timer(0.3, close)
    closer.start()
    with pytest.raises(comfy_airlock.WorkerDied, match=f"pid {pid}"):
        w.call("fault_targets:echo", BIG)
    closer.join(BOUND)
    assert took and took[0] < 5.0, f"close() took {took}"


def _answer(w, pid):
    """The host's answer to the worker's question is what does not fit."""
    with pytest.raises(comfy_airlock.DeadlineExceeded) as info:
        w.run("forgeries:question_then_hang", (600.0,), deadline=0.5)
    assert info.value.escalation == "kill", str(info.value)


def _big_answer(topic, payload):
    return BIG


# case -> (how it ends the call, the Worker's settings)
CASES = {
    "deadline, while answering a question": (
        _answer,
        {"signal_after": 0.1, "kill_after": 0.3, "on_event": _big_answer},
    ),
    "deadline": (_deadline, {"signal_after": 0.1, "kill_after": 0.3}),
    "ComfyUI interrupt": (_comfyui_interrupt, {"signal_after": 0.1, "kill_after": 0.3}),
    "Worker.interrupt()": (_worker_interrupt, {"signal_after": 0.1, "kill_after": 0.3}),
    "liveness": (_liveness, {"liveness": (0.05, 0.5), "signal_after": None, "kill_after": None}),
    "close()": (_close, {"signal_after": None, "kill_after": None}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_send_the_worker_does_not_read_is_bounded(spawn, fault, leaks, case):
    end_call, settings = CASES[case]
    run = fault(f"send blocked: {case}")
    for i in range(iterations(2)):
        with run.iteration(i):
            w = spawn(**settings)
            pid = w.pid if end_call is _answer else _stop_reading(w)
            rescue = Killer(pid, 30.0)
            start = time.monotonic()
            end_call(w, pid)
            took = time.monotonic() - start
            assert not rescue.finish(), "only a kill from outside ended the call"
            assert took < BOUND, f"{case}: the call took {took:.1f} s"
            if case != "close()":
                assert w.call("fault_targets:echo", i) == i, "the next call failed"
                assert w.pid != pid
            print(f"send blocked, {case}: the call ended after {took:.2f} s")
            run.outcome(f"ended within {next(b for b in (1, 2, 5, 10) if took < b)} s")
            run.check_leaks(i, leaks.check([w] if case != "close()" else []))
            w.close(grace=2.0)
    run.finish()

"""SIGKILL a worker at a random moment of a call, of a tensor transfer, of a spawn and of an
eviction; after each: the error names the worker and the cause, the next call succeeds, and
nothing leaks (see ``leaks.py``)."""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
from conftest import HELPERS

import comfy_airlock

from .chaos import Killer, SpawnKiller, iterations, wait_dead
from .conftest import WORKER_SIDE

MIB = 1 << 20


def _died(e: BaseException, w, pid: int, during: str) -> None:
    """A death report must name the worker, its pid, the signal and what it was doing."""
    msg = str(e)
    assert isinstance(e, comfy_airlock.WorkerDied), f"{type(e).__name__}: {msg}"
    assert f"worker '{w.name}'" in msg and f"pid {pid}" in msg, msg
    assert "SIGKILL" in msg and during in msg, msg


def test_kill_during_a_call(spawn, fault, leaks):
    run = fault("kill -9 during a call")
    w = spawn()
    w.call("fault_targets:echo", 0)
    leaks.baseline_threads()
    for i in range(iterations(100)):
        with run.iteration(i):
            target, arg = run.rng.choice(
                [
                    ("fault_targets:spin", 0.004),
                    ("fault_targets:nap", 0.004),
                    ("fault_targets:echo", i),
                ]
            )
            pid = w.pid
            killer = Killer(pid, run.rng.uniform(0, 0.007))
            try:
                assert w.call(target, arg) == arg
                run.outcome("finished")
            except comfy_airlock.AirlockError as e:
                _died(e, w, pid, f"a call to '{target}'")
                run.outcome("died")
            if killer.finish():
                assert wait_dead(w, pid), "the host never noticed the kill"
            assert w.call("fault_targets:echo", i) == i, "the next call failed"
            run.check_leaks(i, leaks.check([w]))
    run.finish()


def test_kill_during_a_tensor_transfer(spawn, fault, leaks):
    run = fault("kill -9 during a tensor transfer")
    w = spawn()
    sizes = [1 * MIB, 8 * MIB, 24 * MIB, 40 * MIB]
    arrays = {n: np.full(n, 7, dtype=np.uint8) for n in sizes}
    w.call("fault_targets:checksum", arrays[MIB])
    leaks.baseline_threads()
    for i in range(iterations(80)):
        with run.iteration(i):
            n = run.rng.choice(sizes)
            way = run.rng.choice(["to worker", "from worker", "both ways"])
            pid = w.pid
            killer = Killer(pid, run.rng.uniform(0, 0.05))
            try:
                if way == "to worker":
                    target = "fault_targets:checksum"
                    assert w.call(target, arrays[n]) == 7 * len(range(0, n, 4096))
                elif way == "from worker":
                    target = "fault_targets:make"
                    got = w.call(target, n, i % 251)
                    assert got.shape == (n,) and got[::4096].min() == got[::4096].max() == i % 251
                    del got
                else:
                    target = "fault_targets:echo"
                    got = w.call(target, arrays[n])
                    assert got.shape == (n,) and int(got[::4096].sum()) == 7 * len(
                        range(0, n, 4096)
                    )
                    del got
                run.outcome("finished")
            except comfy_airlock.AirlockError as e:
                _died(e, w, pid, f"a call to '{target}'")
                run.outcome("died")
            if killer.finish():
                assert wait_dead(w, pid), "the host never noticed the kill"
            small = np.arange(1000, dtype=np.int64)
            back = w.call("fault_targets:echo", small)
            assert np.array_equal(back, small), "the next transfer is wrong"
            del back
            # Every region of ours was released by the worker, and what we held of its
            # regions is gone with `back`: the worker's pool is empty too.
            assert w.call("fault_targets:lane_stats")["leased_regions"] == 0
            run.check_leaks(i, leaks.check([w]))
    run.finish()


def test_kill_during_a_spawn(spawn, fault, leaks):
    """The kill lands anywhere from fork to the end of the handshake (or just after it)."""
    run = fault("kill -9 during a spawn (handshake)")
    w = spawn()
    leaks.baseline_threads()
    for i in range(iterations(60)):
        with run.iteration(i):
            fresh = run.rng.random() < 0.2  # a new Worker object, else a lazy respawn
            if not fresh:
                pid = w.pid
                w.kill()
                assert wait_dead(w, pid)
            killer = SpawnKiller(run.rng.uniform(0, 0.2))
            v = None
            try:
                if fresh:
                    v = comfy_airlock.Worker(
                        sys.executable,
                        sys_path=[str(WORKER_SIDE), str(HELPERS)],
                        name=f"{w.name}-fresh",
                        connect_timeout=30,
                    )
                    leaks.watch(v)
                    assert v.call("fault_targets:echo", i) == i
                else:
                    assert w.call("fault_targets:echo", i) == i
                run.outcome("spawned")
            except comfy_airlock.SpawnError as e:
                name = f"{w.name}-fresh" if fresh else w.name
                msg = str(e)
                assert f"worker '{name}'" in msg and "could not start" in msg, msg
                run.outcome("spawn refused: " + _spawn_cause(msg))
            except comfy_airlock.WorkerDied as e:
                # Killed after the handshake, during the first call.
                assert "SIGKILL" in str(e), str(e)
                run.outcome("died in its first call")
            finally:
                killed = killer.finish()
                if killer.pid is not None:
                    leaks.note_pid(killer.pid)
            if v is not None:
                v.close(grace=1.0)
            if killed and not fresh and killer.pid is not None:
                wait_dead(w, killer.pid)
            assert w.call("fault_targets:echo", i) == i, "the next call failed"
            run.check_leaks(i, leaks.check([w]))
    run.finish()


def _spawn_cause(msg: str) -> str:
    for cause in ("SIGKILL", "closed the connection", "connection lost"):
        if cause in msg:
            return cause
    return msg.splitlines()[0][:80]


def test_kill_during_an_eviction(spawn, fault, leaks):
    """Model commands on the control lane (what ComfyUI's free_memory sends through a stand-in)
    with the worker killed part way; a command for a dead generation is refused unsent, and
    the new generation holds nothing it was not given."""
    run = fault("kill -9 during an eviction (control lane)")
    w = spawn(env={**os.environ, "AIRLOCK_WORKER": "1"})
    models: dict[str, int] = {}
    generation = 0
    leaks.baseline_threads()
    for i in range(iterations(60)):
        with run.iteration(i):
            if w.generation != generation or not models:
                models = w.call("fault_targets:make_models", 3, 4, 4 * MIB)
                generation = w.generation
            pid = w.pid
            ops = [
                (mid, run.rng.choice(["unload", "partially_unload", "partially_load"]))
                for mid in run.rng.choices(list(models.values()), k=12)
            ]
            killer = Killer(pid, run.rng.uniform(0, 0.005))
            died = None
            for mid, op in ops:
                arg = {"unload": 0.0, "partially_unload": 2 * MIB, "partially_load": 1e32}[op]
                try:
                    done, refusal, report = w.model_command(generation, mid, op, arg, timeout=10)
                except comfy_airlock.AirlockError as e:
                    msg = str(e)
                    assert f"worker '{w.name}'" in msg, msg
                    died = died or msg
                    continue
                if refusal is not None:
                    # Only a dead generation may refuse these (the models are idle).
                    assert "is gone" in refusal and f"worker '{w.name}'" in refusal, refusal
                    died = died or refusal
                else:
                    assert report["pid"] == pid and done >= 0
            run.outcome("interrupted" if died else "completed")
            if killer.finish():
                assert wait_dead(w, pid), "the host never noticed the kill"
                done, refusal, report = w.model_command(generation, 1, "unload")
                assert refusal is not None and "is gone" in refusal, "a stale command was sent"
            truth = w.call("fault_targets:models_report")
            if w.generation != generation:
                assert truth["models"] == {}, "a new generation holds models it never made"
                assert truth["pid"] != pid
            else:
                assert set(truth["models"]) == set(models.values())
            run.check_leaks(i, leaks.check([w]))
    run.finish()


def test_the_call_after_kill_starts_a_new_generation(spawn, fault, leaks):
    """``Worker.kill()`` waits until the process is gone, so the next call never meets it: it
    starts a new generation (README: "The next call starts a new generation"). A call that
    was running when ``kill()`` came fails with ``WorkerDied``."""
    run = fault("Worker.kill() then a call")
    w = spawn()
    w.call("fault_targets:echo", 0)
    leaks.baseline_threads()
    for i in range(iterations(10)):
        with run.iteration(i):
            pid, gen = w.pid, w.generation
            during = i % 2 == 1
            if during:
                killer = threading.Timer(run.rng.uniform(0.05, 0.2), w.kill)
                killer.start()
                try:
                    w.call("fault_targets:nap", 30.0)
                    raise AssertionError("the call outlived its worker")
                except comfy_airlock.WorkerDied as e:
                    _died(e, w, pid, "a call to 'fault_targets:nap'")
                killer.join()
            else:
                w.kill()
            assert not w.alive and w.pid is None
            assert w.call("fault_targets:echo", i) == i
            assert w.generation == gen + 1 and w.pid != pid
            run.outcome(
                "killed during a call, then a new generation" if during else "new generation"
            )
            run.check_leaks(i, leaks.check([w]))
    run.finish()

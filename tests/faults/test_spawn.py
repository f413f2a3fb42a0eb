"""How a worker is started (crates/airlock-supervisor/src/exec.rs): never by ``fork`` from a
host full of BLAS, OpenMP and torch threads; with exactly the descriptors it needs; and
non-dumpable, so that a sibling of the same user cannot take its lanes."""

from __future__ import annotations

import ctypes
import errno
import faulthandler
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from conftest import evil_python

import comfy_airlock
from comfy_airlock import _native

from .chaos import iterations
from .conftest import WORKER_SIDE

SPAWNERS = 4
TAKE_FD = WORKER_SIDE / "take_fd.py"

# --- a fork detector: glibc runs every atfork prepare handler in the thread that forks --------

_forks_in_spawners = [0]


def _prepare() -> None:
    if threading.current_thread().name.startswith("fault-spawner"):
        _forks_in_spawners[0] += 1


_PREPARE = ctypes.CFUNCTYPE(None)(_prepare)
_atfork_registered = False


def _count_forks() -> None:
    """Registers the handler once per process (it cannot be removed; it only counts)."""
    global _atfork_registered
    if not _atfork_registered:
        # pthread_atfork itself is in libc_nonshared.a; this is what it calls.
        libc = ctypes.CDLL(None)
        assert libc.__register_atfork(_PREPARE, None, None, None) == 0
        _atfork_registered = True


# A worker that starts in tens of milliseconds: the native module alone, loaded by path (no
# numpy, no runtime), connected, then idle until it is killed.
TINY_WORKER = """
import importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location("comfy_airlock._native", os.environ["TINY_NATIVE"])
native = importlib.util.module_from_spec(spec)
spec.loader.exec_module(native)
link = native.connect(os.environ["AIRLOCK_SOCKET"], sys.stdin.readline().strip(), "tiny")
time.sleep(600)
"""


def _busy(stop: threading.Event, work) -> threading.Thread:
    """Runs ``work`` (a BLAS or torch call: its library's threads wake) every few milliseconds,
    leaving the GIL and the cores to the spawners most of the time."""

    def loop() -> None:
        while not stop.is_set():
            work()
            time.sleep(0.01)

    t = threading.Thread(target=loop, name="fault-busy", daemon=True)
    t.start()
    return t


def test_spawns_and_kills_from_a_busy_host_never_hang(fault, leaks, tmp_path):
    import numpy as np
    import scipy.linalg.blas
    import torch

    run = fault("spawn + kill from 4 threads while BLAS (numpy, scipy) and torch threads are busy")
    _count_forks()
    a = np.random.default_rng(0).random((192, 192))
    t = torch.rand(192, 192)
    stop = threading.Event()
    busy = [
        _busy(stop, lambda: a @ a),  # numpy's OpenBLAS pool
        _busy(stop, lambda: scipy.linalg.blas.dgemm(1.0, a, a)),  # scipy's bundled OpenBLAS
        _busy(stop, lambda: torch.mm(t, t)),  # torch's intra-op pool
    ]
    per_thread = iterations(50)
    results: list[list[str | None]] = [[] for _ in range(SPAWNERS)]
    python = evil_python(tmp_path, TINY_WORKER)
    env = {"TINY_NATIVE": _native.__file__, "PATH": os.environ["PATH"]}
    forks_before = _forks_in_spawners[0]
    seeds = [run.rng.random() for _ in range(SPAWNERS)]

    def spawner(k: int) -> None:
        rng = random.Random(seeds[k])
        for n in range(per_thread):
            try:
                w = comfy_airlock.Worker(python, env=env, name=f"busy-{k}-{n}", connect_timeout=60)
                leaks.watch(w)
                if rng.random() < 0.5:
                    # kill() waits until the process is gone and forgets it (the next call
                    # would start a new generation): close() then has nothing left to end.
                    w.kill()
                    results[k].append("SIGKILL")
                    assert not w.alive and w.close(grace=0.05) is None
                else:
                    results[k].append("closed (SIGKILL after a 0.05 s grace)")
                    ended = w.close(grace=0.05)
                    assert ended is not None and "SIGKILL" in ended, ended
            except Exception as e:  # recorded below, in the main thread
                results[k].append(f"error: {type(e).__name__}: {e}")

    threads = [
        threading.Thread(target=spawner, args=(k,), name=f"fault-spawner-{k}", daemon=True)
        for k in range(SPAWNERS)
    ]
    started = time.monotonic()
    for th in threads:
        th.start()
    deadline = started + 240  # bounds a hang; the 200 spawns take well under a minute
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))
    stuck = [th.name for th in threads if th.is_alive()]
    stop.set()
    for th in busy:
        th.join(10)
    if stuck:
        faulthandler.dump_traceback(all_threads=True)
    i = 0
    for k in range(SPAWNERS):
        for what in results[k] + ["error: hung"] * (per_thread - len(results[k])):
            with run.iteration(i):
                assert not what.startswith("error"), f"spawner {k}: {what}"
                run.outcome(what)
            i += 1
    with run.iteration(i):
        assert not stuck, f"spawner threads still inside a spawn after 240 s: {stuck}"
        forks = _forks_in_spawners[0] - forks_before
        assert forks == 0, f"{forks} spawns ran the host's atfork handlers (a fork)"
    run.check_leaks(i, leaks.check([]))
    run.outcome(f"{time.monotonic() - started:.1f} s for {SPAWNERS * per_thread} spawns")
    run.finish()


# --- descriptors -------------------------------------------------------------------------------


def _inheritable(kind: str, tmp: Path, rng) -> tuple[int, list[object]]:
    """A descriptor of ``kind`` that the host holds without close-on-exec, at a random number
    (a low one, or one far above what the worker uses)."""
    keep: list[object] = []
    if kind == "secret file":
        path = tmp / "secret"
        path.write_text("hunter2\n")
        fd = os.open(path, os.O_RDONLY)
    elif kind == "pipe":
        fd, w = os.pipe()
        keep.append(w)
    elif kind == "socket":
        a, b = socket.socketpair()
        keep += [a, b]
        fd = os.dup(a.fileno())
    else:  # memfd
        fd = os.memfd_create("host-secret-memfd", 0)
    if rng.random() < 0.5:
        high = rng.randrange(300, 900)
        while _is_open(high):
            high += 1
        os.dup2(fd, high, inheritable=True)
        os.close(fd)
        fd = high
    os.set_inheritable(fd, True)
    return fd, keep


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_a_worker_gets_exactly_its_descriptors(spawn, fault, leaks, tmp_path):
    run = fault("host holds inheritable fds (file, pipe, socket, memfd) at spawn")
    kinds = ["secret file", "pipe", "socket", "memfd"]
    for i in range(iterations(8)):
        with run.iteration(i):
            chosen = run.rng.sample(kinds, run.rng.randrange(1, len(kinds) + 1))
            held = [_inheritable(k, tmp_path, run.rng) for k in chosen]
            try:
                objects = {(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd, _ in held}
                w = spawn(preload=["spawn_side"])
                at_start = w.call("spawn_side:at_start")
                now = w.call("spawn_side:now")
                w.close(grace=2.0)
            finally:
                for fd, keep in held:
                    os.close(fd)
                    for k in keep:
                        if isinstance(k, int):
                            os.close(k)
                        else:
                            k.close()
            assert sorted(at_start) == [0, 1, 2, 3, 4], at_start
            assert at_start[0][0] == "/dev/null" and at_start[3][0].startswith("pipe:")
            assert at_start[4][0].startswith("/memfd:"), at_start[4]
            seen = {(dev, ino) for _, dev, ino in now.values()}
            assert not objects & seen, f"host fds {chosen} reached the worker: {now}"
            run.outcome(f"{len(chosen)} inheritable host fds, worker had 0-4 only")
            run.check_leaks(i, leaks.check([]))
    run.finish()


# --- least privilege ---------------------------------------------------------------------------


def _sibling(pid: int, fds: list[int]) -> dict:
    out = subprocess.run(
        [sys.executable, str(TAKE_FD), str(pid), *map(str, fds)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


SECRETS = {f"FAULT_SECRET_{n}_TOKEN": f"s{n}" for n in range(5)} | {
    "OPENAI_API_KEY": "sk-fault",
    "ANTHROPIC_API_KEY": "sk-ant-fault",
    "HF_TOKEN": "hf_fault",
    "AWS_SECRET_ACCESS_KEY": "aws-fault",
    "AWS_SESSION_TOKEN": "aws-session",
    "GITHUB_TOKEN": "ghp_fault",
    "DATABASE_PASSWORD": "pw",
    "STRIPE_API_KEY": "sk_live_fault",
    "SLACK_BOT_TOKEN": "xoxb-fault",
    "DATABASE_URL": "postgres://u:pw@db/x",
}


def test_a_sibling_cannot_take_a_workers_lanes_nor_read_its_secrets(
    spawn, fault, leaks, monkeypatch
):
    run = fault("same-user sibling takes a worker's lane fds (pidfd_getfd); default env")
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    for i in range(iterations(4)):
        with run.iteration(i):
            w = spawn()
            env = w.call("airlock_escape:environ")
            leaked = sorted(k for k in SECRETS if k in env)
            assert leaked == [] and env["PATH"] == os.environ["PATH"], leaked
            assert w.call("spawn_side:dumpable") == 0
            assert int(w.call("spawn_side:drop_capabilities"), 16) == 0
            lanes = w.call("spawn_side:lane_fds")
            assert len(lanes) == 4, lanes  # call, control, route, events (ADR 0055, 0056)
            fds = lanes  # (the interrupt page's fd 4 is closed once mapped, at the connect)
            got = _sibling(w.pid, fds)
            assert int(got["caps"], 16) == 0, got
            assert got["fds"] == {str(fd): errno.EPERM for fd in fds}, got
            assert got["environ"] in (errno.EACCES, errno.EPERM), got
            run.outcome("sibling refused (EPERM) on all four lanes, and /proc/<pid>/environ")
            # The control: the same sibling takes them from a worker made dumpable again.
            assert w.call("spawn_side:set_dumpable", True) == 1
            again = _sibling(w.pid, fds)
            assert again["fds"] == {str(fd): 0 for fd in fds}, again
            w.close(grace=2.0)
            run.check_leaks(i, leaks.check([]))
    # The explicit opt-out passes the host's whole environment.
    w = spawn(env=comfy_airlock.INHERIT_ENV)
    assert w.call("os:getenv", "OPENAI_API_KEY") == "sk-fault"
    w.close(grace=2.0)
    run.finish()

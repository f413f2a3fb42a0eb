"""SIGKILL the host while its workers are busy (a long call, transfers, a lingering forked
child, a respawn that may be mid-handshake): every process it started must exit, and what it
could not clean up itself (a handshake's socket directory, a worker's private temp directory)
must be gone once any host spawns again."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import comfy_airlock

from .chaos import SEED, iterations

BUSY_HOST = Path(__file__).resolve().parent / "busy_host.py"


def marked(mark: str, since: int = 0) -> list[str]:
    """Every process whose environment carries ``mark`` (all a host started inherit it).

    Workers are non-dumpable, so without ``CAP_SYS_PTRACE`` (not root) their environment is
    unreadable: then a worker (``-m comfy_airlock.worker``, or a child it forked) started at or
    after clock tick ``since`` counts as marked, so that the test stays able to fail."""
    needle = f"AIRLOCK_FAULT_MARK={mark}".encode() + b"\0"
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:120]
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            state, started = fields[0], int(fields[19])
            try:
                with open(f"/proc/{d}/environ", "rb") as f:
                    if needle not in f.read() + b"\0":
                        continue
            except PermissionError:
                if "comfy_airlock.worker" not in cmd or started < since:
                    continue
        except OSError:
            continue
        if state != "Z":
            found.append(f"pid {d} ({state}, {_stage(int(d))}): {cmd}")
    return found


def _ticks_now() -> int:
    """Clock ticks since boot, the unit of a process's start time in ``/proc/<pid>/stat``."""
    with open("/proc/uptime") as f:
        return int(float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK"))


def _stage(pid: int) -> str:
    """What a leftover process is: its group (the worker it belongs to), its threads (a
    connected worker runs `airlock-control`; a forked child has only the forking thread) and
    its sockets."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            pgid = f.read().rsplit(")", 1)[1].split()[2]
        threads = []
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                threads.append(f.read().strip())
        try:
            socks: int | str = sum(
                os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
                for fd in os.listdir(f"/proc/{pid}/fd")
            )
        except PermissionError:
            socks = "unreadable (non-dumpable)"
    except OSError:
        return "gone"
    return f"group {pgid}, threads {sorted(threads)}, {socks} sockets"


def dirs_of(pid: int) -> list[str]:
    """The handshake (``airlock-<pid>-*``) and private temp (``airlock-tmp-<pid>-*``)
    directories of host ``pid``."""
    bases = {tempfile.gettempdir(), "/tmp", os.environ.get("XDG_RUNTIME_DIR", "/tmp")}
    return [
        os.path.join(b, d)
        for b in bases
        if os.path.isdir(b)
        for d in os.listdir(b)
        if d.startswith((f"airlock-{pid}-", f"airlock-tmp-{pid}-"))
    ]


def test_host_killed_while_its_workers_are_busy(fault, leaks):
    run = fault("host killed while its workers are busy")
    for i in range(iterations(8)):
        with run.iteration(i):
            mark = f"{SEED}-{i}-{os.getpid()}"
            since = _ticks_now()
            host = subprocess.Popen(
                [sys.executable, str(BUSY_HOST), str(run.rng.randrange(1 << 30))],
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "AIRLOCK_FAULT_MARK": mark},
            )
            try:
                lines = []
                for line in host.stdout:
                    lines.append(line.strip())
                    if line.strip() == "ready":
                        break
                assert lines and lines[-1] == "ready", f"the busy host did not start: {lines}"
                time.sleep(run.rng.uniform(0, 0.3))
            finally:
                host.kill()
                host.wait()
                host.stdout.close()
            # A worker still importing when its host died notices only when it reaches the
            # handshake (it cannot connect, and exits): bounded by its start-up, which on a
            # loaded 2-core CI machine takes seconds.
            deadline = time.monotonic() + 20.0
            left = marked(mark, since)
            while left and time.monotonic() < deadline:
                time.sleep(0.05)
                left = marked(mark, since)
            for p in left:
                run.check_leaks(i, [f"outlived its host: {p}"])
            run.outcome("all workers gone" if not left else "orphans")
            # A host killed in the middle of a spawn cannot remove that spawn's directories;
            # its worker removes the handshake's when it gets far enough, and the next spawn
            # by any host removes whatever a dead host left.
            at_death = [os.path.basename(d) for d in dirs_of(host.pid)]
            if any(not d.startswith("airlock-tmp-") for d in at_death):
                run.outcome("handshake directory left at death")
            if any(d.startswith("airlock-tmp-") for d in at_death):
                run.outcome("workers' temp directories left at death")
            w = comfy_airlock.Worker(sys.executable, name="after-host-death", connect_timeout=30)
            w.close()
            run.check_leaks(
                i,
                [
                    f"directory of the dead host left after the next spawn: {d}"
                    for d in dirs_of(host.pid)
                ],
            )
            run.check_leaks(i, leaks.check())
    run.finish()

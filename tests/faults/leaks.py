"""The one leak checker every fault test uses: after a fault, what this process (the host)
holds must be exactly what its live workers account for.

Checked, from the kernel's view rather than our own bookkeeping:

- **shared memory**: every memfd this process has open or mapped (``/proc/self/fd``,
  ``/proc/self/maps``), told apart by inode (a dead generation's ``airlock-t-0`` and the live
  one's have the same name). Our pool's segments must number what the live lane's stats say,
  the worker's segments must belong to the live worker pid and number its ``peer_segments``,
  and no region may still be leased once the test dropped its results;
- **socket directories**: none of ours left in the runtime base (``airlock-<pid>-*``);
- **processes**: no descendant of this process other than the live workers (a zombie counts:
  nobody reaped it), and no process at all left in the process group of any worker this test
  started, except the live ones (a forked child that was reparented still has its group);
- **threads**: no more threads than the test had when it started, with the same live workers.

Some of these settle a moment after a death (the reaper thread, the kernel's reparenting), so
:meth:`LeakChecker.check` polls until clean or ``settle`` seconds pass, then reports what is
left. That wait bounds how long a leak may take to clear; it is not a timing assertion.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from conftest import socket_dirs

# --- the kernel's view -------------------------------------------------------------------------


def memfds() -> dict[int, str]:
    """inode -> memfd name, for every airlock memfd this process has open or mapped."""
    found: dict[int, str] = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("/memfd:airlock"):
                found[os.stat(f"/proc/self/fd/{fd}").st_ino] = _memfd_name(target)
        except OSError:
            pass  # closed since listing (our own listdir fd, a racing close)
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/memfd:airlock"):
                found[int(parts[4])] = _memfd_name(parts[5])
    return found


def _memfd_name(path: str) -> str:
    return path.strip().removeprefix("/memfd:").removesuffix(" (deleted)")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    state: str

    def describe(self) -> str:
        try:
            with open(f"/proc/{self.pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = "?"
        return (
            f"pid {self.pid} (ppid {self.ppid}, pgid {self.pgid}, state {self.state}): {cmd[:160]}"
        )


def processes() -> dict[int, Proc]:
    table: dict[int, Proc] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2 :].split()
        table[int(d)] = Proc(int(d), int(fields[1]), int(fields[2]), fields[0].decode())
    return table


def descendants(root: int, table: dict[int, Proc]) -> list[Proc]:
    kids: dict[int, list[Proc]] = {}
    for p in table.values():
        kids.setdefault(p.ppid, []).append(p)
    out, todo = [], [root]
    while todo:
        for p in kids.get(todo.pop(), []):
            out.append(p)
            todo.append(p.pid)
    return out


def thread_count() -> int:
    return len(os.listdir("/proc/self/task"))


# --- the checker -------------------------------------------------------------------------------


@dataclass
class LeakChecker:
    """Tracks the workers of one test; :meth:`check` lists what leaked."""

    seen_pids: set[int] = field(default_factory=set)
    names: set[str] = field(default_factory=set)
    threads: int | None = None
    baseline_procs: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        # Whatever other tests left running is not this test's leak.
        self.baseline_procs = {p.pid for p in descendants(os.getpid(), processes())}

    def watch(self, *workers: Any) -> None:
        """Remembers each worker's name and current pid (call after anything that may have
        respawned it)."""
        for w in workers:
            self.names.add(w.name)
            if w.pid is not None:
                self.seen_pids.add(w.pid)

    def note_pid(self, pid: int) -> None:
        self.seen_pids.add(pid)

    def baseline_threads(self) -> None:
        """Fixes the thread count to return to, with the live workers the test keeps."""
        self.threads = thread_count()

    def check(self, live: Iterable[Any] = (), *, leased_ok: bool = False, settle: float = 5.0):
        """Polls until nothing leaks or ``settle`` seconds pass; returns the leaks left (a
        list of sentences, empty when clean)."""
        live = list(live)
        self.watch(*live)
        deadline = time.monotonic() + settle
        while True:
            problems = self._problems(live, leased_ok)
            if not problems or time.monotonic() >= deadline:
                return problems
            time.sleep(0.05)

    def _problems(self, live: list[Any], leased_ok: bool) -> list[str]:
        gc.collect()
        problems: list[str] = []
        live_pids = {w.pid for w in live if w.alive and w.pid is not None}
        problems += self._shared_memory(live, live_pids, leased_ok)
        dirs = socket_dirs()
        if dirs:
            problems.append(f"socket directories left: {dirs}")
        problems += self._processes(live_pids)
        if self.threads is not None and thread_count() > self.threads:
            names = sorted(_comm(t) for t in os.listdir("/proc/self/task"))
            problems.append(
                f"{thread_count()} threads, {self.threads} at the start of the test: {names}"
            )
        return problems

    def _shared_memory(self, live: list[Any], live_pids: set[int], leased_ok: bool) -> list[str]:
        problems = []
        found = memfds()
        ours: dict[str, set[int]] = {}  # worker name -> inodes of our pool's segments
        theirs: dict[int, set[int]] = {}  # worker pid -> inodes of its segments we hold
        for ino, name in found.items():
            if name.startswith("airlock-worker-"):
                pid = int(name.split("-")[2])
                theirs.setdefault(pid, set()).add(ino)
                if pid not in live_pids:
                    problems.append(f"segment {name} of worker pid {pid}, which is gone, is held")
                continue
            owner = _pool_owner(name, self.names | {w.name for w in live})
            if owner is None:
                continue  # another test's worker, not ours to judge
            ours.setdefault(owner, set()).add(ino)
        for w in live:
            lane = w.lane if w.alive else None
            stats = lane.stats() if lane is not None else None
            have_ours = len(ours.pop(w.name, set()))
            have_theirs = len(theirs.get(w.pid, set())) if w.pid in live_pids else 0
            want_ours = stats["segments"] if stats else 0
            want_theirs = stats["peer_segments"] if stats else 0
            if have_ours != want_ours:
                problems.append(
                    f"worker {w.name!r}: {have_ours} of our segments open or mapped, its lane "
                    f"accounts for {want_ours}"
                )
            if have_theirs != want_theirs:
                problems.append(
                    f"worker {w.name!r}: {have_theirs} of its segments open or mapped here, the "
                    f"lane knows {want_theirs}"
                )
            if stats and not leased_ok and stats["leased_regions"]:
                problems.append(
                    f"worker {w.name!r}: {stats['leased_regions']} regions "
                    f"({stats['leased_bytes']} bytes) of our pool still leased"
                )
        for name, inodes in ours.items():
            problems.append(f"{len(inodes)} segments of worker {name!r}, which is closed, are held")
        return problems

    def _processes(self, live_pids: set[int]) -> list[str]:
        problems = []
        table = processes()
        for p in descendants(os.getpid(), table):
            if p.pid in self.baseline_procs and p.pid not in self.seen_pids:
                continue
            if p.pid in live_pids and p.state != "Z":
                continue
            if p.state == "Z" and p.ppid in live_pids:
                continue  # a live worker's unreaped child: the worker's business until it exits
            problems.append(f"stray process {p.describe()}")
        groups = self.seen_pids - live_pids
        for p in table.values():
            if p.pgid in groups and p.pid not in live_pids:
                desc = p.describe()
                if not any(desc in x for x in problems):
                    problems.append(f"process left in worker group {p.pgid}: {desc}")
        return problems


def _pool_owner(memfd: str, names: set[str]) -> str | None:
    """The worker whose host-side pool made ``memfd`` (``airlock-<name>-<segment id>``)."""
    head, _, seg = memfd.rpartition("-")
    if not seg.isdigit():
        return None
    name = head.removeprefix("airlock-")
    return name if name in names else None


def _comm(tid: str) -> str:
    try:
        with open(f"/proc/self/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"

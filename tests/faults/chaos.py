"""Fault injection: seeded randomness, killers that strike at a random moment, and the record
of every fault run (the table in docs/reliability.md comes from it).

``AIRLOCK_FAULT_SEED`` fixes the seed (default: a fresh one, printed in the summary and in every
failure); ``AIRLOCK_FAULT_SCALE`` multiplies every test's iteration count (default 1; the soak
figures in docs/reliability.md use more). Each test draws from its own ``random.Random``
seeded with the seed and its name, so a failing test replays alone with the same seed.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

SEED = int(os.environ.get("AIRLOCK_FAULT_SEED") or random.SystemRandom().randrange(1 << 32))
SCALE = float(os.environ.get("AIRLOCK_FAULT_SCALE") or 1.0)

RUNS: list[FaultRun] = []


def iterations(n: int) -> int:
    return max(1, round(n * SCALE))


def children() -> set[int]:
    """Pids of this process's children (every thread's)."""
    out: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                out.update(int(p) for p in f.read().split())
        except OSError:
            pass
    return out


class Killer(threading.Thread):
    """Sends ``sig`` (SIGKILL) to ``pid`` after ``delay`` seconds, unless cancelled first."""

    def __init__(self, pid: int, delay: float, sig: int = signal.SIGKILL) -> None:
        super().__init__(name="fault-killer", daemon=True)
        self.pid, self.delay, self.sig = pid, delay, sig
        self.fired = False
        self._cancel = threading.Event()
        self.start()

    def run(self) -> None:
        if self._cancel.wait(self.delay):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, self.sig)
            self.fired = True

    def finish(self) -> bool:
        """Cancels it if it has not struck yet; returns whether it did."""
        self._cancel.set()
        self.join()
        return self.fired


class SpawnKiller(threading.Thread):
    """Kills the next child this process starts, ``delay`` seconds after it appears: a worker
    caught somewhere in exec, interpreter start-up, imports or the handshake."""

    def __init__(self, delay: float) -> None:
        super().__init__(name="fault-spawn-killer", daemon=True)
        self.delay = delay
        self.known = children()
        self.pid: int | None = None
        self.fired = False
        self._cancel = threading.Event()
        self.start()

    def run(self) -> None:
        deadline = time.monotonic() + 30
        while not self._cancel.is_set() and time.monotonic() < deadline:
            new = children() - self.known
            if new:
                self.pid = min(new)
                break
            time.sleep(0.0005)
        if self.pid is None or self._cancel.wait(self.delay):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
            self.fired = True

    def finish(self) -> bool:
        self._cancel.set()
        self.join()
        return self.fired


def wait_dead(worker: Any, pid: int, timeout: float = 5.0) -> bool:
    """Waits until the host has noticed that process ``pid`` of ``worker`` died (its reaper
    runs on a pidfd): the worker is down, or already running a new generation (a kill that
    landed before a call started is noticed, and that call respawns)."""
    deadline = time.monotonic() + timeout
    while worker.alive and worker.pid == pid and time.monotonic() < deadline:
        time.sleep(0.002)
    return not (worker.alive and worker.pid == pid)


@dataclass
class FaultRun:
    """The record of one fault test: iterations, what each ended as, failures and leaks."""

    fault: str
    rng: random.Random
    iterations: int = 0
    failures: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    started: float = field(default_factory=time.monotonic)
    seconds: float = 0.0

    @contextlib.contextmanager
    def iteration(self, i: int) -> Iterator[None]:
        """One injection. An assertion or unexpected exception inside is recorded as a failure
        of this iteration (the run goes on, so the table counts them all)."""
        try:
            yield
        except Exception as e:
            self.failures.append(f"iteration {i}: {type(e).__name__}: {e}"[:2000])
        finally:
            self.iterations += 1

    def outcome(self, what: str) -> None:
        self.outcomes[what] += 1

    def check_leaks(self, i: int, problems: list[str]) -> None:
        for p in problems:
            self.leaks.append(f"iteration {i}: {p}")

    def finish(self) -> None:
        """Records the run for the summary and fails the test on any failure or leak."""
        self.seconds = time.monotonic() - self.started
        RUNS.append(self)
        bad = self.failures[:5] + self.leaks[:5]
        assert not bad, (
            f"{self.fault}: {len(self.failures)} failures and {len(self.leaks)} leaks in "
            f"{self.iterations} iterations (AIRLOCK_FAULT_SEED={SEED}); first:\n  "
            + "\n  ".join(bad)
        )


def records() -> list[dict[str, Any]]:
    """This process's runs, and those sent by the other test processes (``add_records``)."""
    own = [
        {
            "fault": r.fault,
            "iterations": r.iterations,
            "failures": len(r.failures),
            "leaks": len(r.leaks),
            "seconds": round(r.seconds, 2),
            "outcomes": dict(r.outcomes),
        }
        for r in RUNS
    ]
    return own + RECEIVED


# Runs recorded by the other processes of a distributed run (pytest-xdist): each sends its
# records when its session ends, and the process that prints the summary adds them here.
RECEIVED: list[dict[str, Any]] = []


def add_records(runs: list[dict[str, Any]]) -> None:
    RECEIVED.extend(runs)


def summary_lines() -> list[str]:
    runs = records()
    rows = [
        (
            r["fault"],
            str(r["iterations"]),
            str(r["failures"]),
            str(r["leaks"]),
            f"{r['seconds']:.1f}",
            ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items())),
        )
        for r in runs
    ]
    head = ("fault", "iterations", "failures", "leaks", "seconds", "outcomes")
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(5)]
    fmt = " | ".join(f"{{:{w}}}" for w in widths) + " | {}"
    lines = [f"fault suite: seed {SEED}, scale {SCALE}", fmt.format(*head)]
    lines += [fmt.format(*r) for r in rows]
    lines.append(
        f"total: {sum(r['iterations'] for r in runs)} iterations, "
        f"{sum(r['failures'] for r in runs)} failures, {sum(r['leaks'] for r in runs)} leaks, "
        f"{sum(r['seconds'] for r in runs):.1f} s"
    )
    return lines


def summary_json() -> dict[str, Any]:
    return {"seed": SEED, "scale": SCALE, "runs": records()}

"""Fixtures of the fault suite: workers on the host's interpreter with the fault targets on
their path, the leak checker, and the fault record printed as a table at the end."""

from __future__ import annotations

import itertools
import json
import random
import sys
from pathlib import Path

import pytest
from conftest import HELPERS

from . import chaos
from .leaks import LeakChecker

WORKER_SIDE = Path(__file__).resolve().parent / "worker_side"
_names = itertools.count(1)


@pytest.fixture(autouse=True)
def _no_kept_copies(monkeypatch):
    """Kept copies (ADR 0027) hold a sent tensor's region on purpose, for its next send; these
    tests count every region still leased as a leak, so they run with keeping off, on both
    sides (tests/test_kept.py tests keeping)."""
    from comfy_airlock import settings

    monkeypatch.setenv("AIRLOCK_KEEP_SENT_MIB", "0")
    monkeypatch.setattr(settings.get(), "keep_sent", 0)


@pytest.fixture
def leaks() -> LeakChecker:
    return LeakChecker()


@pytest.fixture
def fault(request):
    """``fault(title)``: a :class:`chaos.FaultRun` with this test's own seeded RNG."""

    def make(title: str) -> chaos.FaultRun:
        return chaos.FaultRun(title, random.Random(f"{chaos.SEED}:{request.node.name}"))

    return make


@pytest.fixture
def spawn(leaks):
    """``spawn(**kw)``: a ``comfy_airlock.Worker`` on this interpreter (numpy, no torch import
    needed) with the fault targets importable; closed at the end of the test."""
    import comfy_airlock

    made = []

    def make(**kw) -> comfy_airlock.Worker:
        kw.setdefault("sys_path", [str(WORKER_SIDE), str(HELPERS)])
        kw.setdefault("name", f"fault-{next(_names)}")
        kw.setdefault("connect_timeout", 30)
        w = comfy_airlock.Worker(sys.executable, **kw)
        made.append(w)
        leaks.watch(w)
        return w

    yield make
    for w in made:
        w.close(grace=2.0)


def pytest_sessionfinish(session):
    # A process of a distributed run (pytest-xdist) sends its records to the one that prints
    # the summary (tests/conftest.py).
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["fault_runs"] = json.dumps(chaos.summary_json()["runs"])

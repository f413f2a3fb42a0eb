"""Idle shared memory goes back (comfy_airlock/idle_trim.py, ADR 0028): a worker idle for
AIRLOCK_IDLE_TRIM_S frees its pool's idle segments and unmaps the host's, the host drops its
mappings of the worker's, and the next call still works."""

from __future__ import annotations

import time

import pytest
import torch

from comfy_airlock import settings

N = 16 << 20  # float32 elements: 64 MiB


def _status_kib(pid: int, field: str) -> int:
    """A field of ``pid``'s /proc status, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    pytest.skip(f"no {field} in /proc/<pid>/status")


def _shmem_kib(pid: int) -> int:
    """Shared memory mapped into ``pid``'s resident set (our segments), in KiB."""
    return _status_kib(pid, "RssShmem")


def _until(cond, what: str, within: float = 120.0) -> None:
    end = time.monotonic() + within
    while not cond():
        if time.monotonic() > end:
            pytest.fail(f"not trimmed: {what}")
        time.sleep(0.2)


def test_an_idle_worker_gives_its_shared_memory_back(make_worker, monkeypatch):
    monkeypatch.setenv("AIRLOCK_IDLE_TRIM_S", "1")  # the worker reads it at its start
    monkeypatch.setattr(settings.get(), "idle_trim_s", 1.0)  # this process read it already
    w = make_worker()
    y = w.call("airlock_testpack:ones", N)  # the worker's fresh output, in its pool
    assert float(y.sum()) == N
    assert w.call("airlock_testpack:at", torch.full((N,), 2.0), 3) == 2.0  # ours, mapped there
    pid = w.pid
    assert _shmem_kib(pid) >= (64 << 10), "the worker maps its segment and ours"
    del y
    _until(lambda: _shmem_kib(pid) < (8 << 10), "the worker still maps segments")
    # The host dropped its mappings of the worker's segments too.
    _until(
        lambda: not [k for k in w.lane.mappings if isinstance(k, tuple)],
        "the host still maps the worker's segment",
    )
    # And everything works after: a new segment, mapped and populated again.
    y = w.call("airlock_testpack:ones", N)
    assert float(y.sum()) == N
    assert w.call("airlock_testpack:at", y, N - 1) == 1.0
    assert w.pid == pid


def test_a_busy_worker_reuses_its_freed_heap_and_an_idle_one_gives_it_back(
    make_worker, monkeypatch
):
    """ADR 0040: what a node frees stays in the worker's heap for the next call, which then
    takes no page fault to use it again, and goes back to the system once the worker is idle.
    Without the worker's heap knobs (heap_policy.py) glibc gave the heap's free top back at
    each free, and the second call faulted in every page again."""
    monkeypatch.setenv("AIRLOCK_IDLE_TRIM_S", "1")  # the worker reads it at its start
    monkeypatch.setattr(settings.get(), "idle_trim_s", 1.0)
    w = make_worker()
    size, blocks = 12 << 20, 4  # four 1024x1024 IMAGE tensors
    pages = size * blocks // 4096
    w.call("airlock_testpack:heap_churn", size, blocks)  # the heap grows once
    faults, kib = w.call("airlock_testpack:heap_churn", size, blocks)
    assert faults < pages // 10, f"{faults} page faults for {pages} pages freed a call ago"
    # Idle: the kept heap goes back (the host reads the worker's status: a call would make it
    # busy again).
    _until(
        lambda: _status_kib(w.pid, "RssAnon") < kib - (size * blocks >> 10) * 3 // 4,
        f"the worker's anonymous memory is still above {kib} KiB less the blocks",
    )
    faults, _ = w.call("airlock_testpack:heap_churn", size, blocks)
    assert faults >= pages // 2, "given back, the heap's pages were faulted in again"


def test_off_keeps_everything(monkeypatch):
    from comfy_airlock import idle_trim

    assert settings.Settings.from_env({"AIRLOCK_IDLE_TRIM_S": "off"}).idle_trim_s is None
    assert settings.Settings.from_env({}).idle_trim_s == 5.0
    monkeypatch.setattr(settings.get(), "idle_trim_s", None)
    assert idle_trim.idle_after() is None


def test_the_host_clock_reads_idle_only_when_no_call_runs_or_waits(make_worker):
    """The host's trim of a worker's segments waits for it to be idle: a call that waits for
    the running one counts as running, also once the first has ended."""
    import threading

    w = make_worker()
    w.call("airlock_testpack:echo", 1)
    idle = w.idle_seconds()
    assert idle is not None and idle >= 0.0
    first = threading.Thread(target=w.call, args=("airlock_testpack:sleep", 0.6))
    first.start()
    time.sleep(0.2)  # the first runs
    assert w.idle_seconds() is None
    second = threading.Thread(target=w.call, args=("airlock_testpack:sleep", 0.6))
    second.start()  # waits for the first
    seen = []
    while first.is_alive() or second.is_alive():
        seen.append(w.idle_seconds())
        time.sleep(0.01)
    first.join()
    second.join()
    assert seen and all(s is None for s in seen), [s for s in seen if s is not None]
    time.sleep(0.05)
    assert w.idle_seconds() >= 0.05

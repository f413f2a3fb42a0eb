"""A call lane's reader spins briefly before it sleeps (ADR 0035), and only briefly: an idle
worker and a host waiting on a long call burn no CPU beyond one short burst per message.

The budget is measured by default (twice the lane's recent wake-ups, at most 1 ms, ADR 0046;
``AIRLOCK_LANE_SPIN_US`` fixes it); an unbounded spin would burn the whole second each check
waits. CPU time is read from ``/proc/<pid>/stat`` (clock ticks) and
``getrusage``; the bounds leave a wide margin over what a bounded spin costs.
"""

from __future__ import annotations

import os
import resource
import time

CPU_BOUND_S = 0.25  # over 1.5 s: a spinning side would use about all of it


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(") ", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def test_an_idle_worker_does_not_spin(make_worker):
    w = make_worker()
    for _ in range(200):  # warm: every reply is followed by a spin for the next call
        assert w.call("airlock_testpack:echo", 1) == 1
    before = _cpu_seconds(w.pid)
    time.sleep(1.5)
    used = _cpu_seconds(w.pid) - before
    assert used < CPU_BOUND_S, f"an idle worker used {used:.2f} s of CPU in 1.5 s"
    assert w.call("airlock_testpack:echo", 2) == 2


def test_a_host_waiting_on_a_long_call_does_not_spin(make_worker):
    w = make_worker()
    assert w.call("airlock_testpack:echo", 1) == 1
    before = _own_cpu_seconds()
    w.call("airlock_testpack:sleep", 1.5)  # the host waits in 10 ms ticks meanwhile
    used = _own_cpu_seconds() - before
    assert used < CPU_BOUND_S, f"waiting 1.5 s for a reply used {used:.2f} s of CPU"


def test_calls_work_with_the_spin_turned_off(make_worker, monkeypatch):
    monkeypatch.setenv("AIRLOCK_LANE_SPIN_US", "0")  # the worker reads it at its start
    w = make_worker()
    assert [w.call("airlock_testpack:echo", i) for i in range(100)] == list(range(100))


def test_both_sides_stamp_the_lane_and_the_spin_is_measured(make_worker):
    # The stamps a read that slept judges the peer by (ADR 0046): the host's call, the
    # worker's receipt of it, its reply and the host's receipt, in that order.
    w = make_worker()
    for i in range(50):
        assert w.call("airlock_testpack:echo", i) == i
    t = w.lane_timing()
    assert t is not None
    assert 0 < t["host_sent_ns"] <= t["worker_got_ns"] <= t["worker_sent_ns"] <= t["host_got_ns"]
    assert 5.0 <= t["spin_us"] <= 1000.0  # measured, within its bounds
    assert t["last_wait_us"] is not None

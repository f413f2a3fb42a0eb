"""Integers of any size cross both ways (README: "int (any size)"): beyond i64 they travel as
two's-complement bytes, not decimal text, so Python's 4 300-digit limit on int/str conversion
does not apply, and one too large for a frame is refused with an error saying so, before any
bytes are made; the worker stays usable after a refusal on either side."""

from __future__ import annotations

import pytest

from .chaos import iterations
from .worker_side.peer_values import BIG_INTS

FRAME = 64 << 20


def test_ints_of_any_size_cross_both_ways(spawn, fault, leaks):
    run = fault("ints beyond i64 (10**5000, -(10**5000), 2**64, -2**63-1, ...) both ways")
    w = spawn()
    w.call("fault_targets:echo", 0)
    leaks.baseline_threads()
    for i in range(iterations(2)):
        with run.iteration(i):
            for name, value in BIG_INTS.items():
                assert w.call("peer_values:same_int", name, value) is True, f"to the worker: {name}"
                got = w.call("peer_values:big_int", name)
                assert type(got) is int and got == value, f"from the worker: {name}"
                back = w.call("fault_targets:echo", value)
                assert type(back) is int and back == value, f"round trip: {name}"
                run.outcome("exact both ways")
            run.check_leaks(i, leaks.check([w]))
    run.finish()


def test_an_int_too_large_for_a_frame_is_refused_clearly(spawn, fault, leaks):
    run = fault("int too large for a frame (64 MiB of bytes), host and worker side")
    w = spawn()
    w.call("fault_targets:echo", 0)
    leaks.baseline_threads()
    words = r"an int of \d+ bits \(\d+ bytes\) cannot be sent: one int may take at most"
    for i in range(iterations(2)):
        with run.iteration(i):
            pid = w.pid
            with pytest.raises(ValueError, match=words):
                w.call("fault_targets:echo", 1 << (8 * FRAME))
            run.outcome("host: refused before sending")
            with pytest.raises(ValueError, match=words) as info:
                w.call("peer_values:int_of_bytes", FRAME + 1)
            assert getattr(info.value, "worker", None) == w.name, info.value
            run.outcome("worker: refused, error re-raised in the host")
            assert w.pid == pid, "a refused int costs no worker"
            assert w.call("fault_targets:echo", 2**64) == 2**64
            run.check_leaks(i, leaks.check([w]))
    run.finish()

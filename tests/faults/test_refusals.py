"""One rule for input the host refuses (docs/reliability.md, "Hostile input"): whatever a
worker sends that the protocol forbids, on either lane and at any layer (frames, bookkeeping,
descriptors, the values inside replies, events and questions), is counted once under its
reason and ends that worker; the call fails with ``ProtocolError`` naming the worker and the
cause, and the next call starts a new generation. Each case is written by a hostile worker
(``worker_side/forgeries.py``) that says what our runtime never would."""

from __future__ import annotations

import os
import time

import pytest

import comfy_airlock
from comfy_airlock import _native

from .chaos import iterations


@pytest.fixture(autouse=True)
def _replies_through_the_socket(monkeypatch):
    """These workers write raw frames on the call lane's socket ahead of their reply, as a
    hostile worker would. A reply that goes by mail (ADR 0061) may be taken before bytes the
    lane never counted, so the refusal would come one call later: the mailboxes are off here,
    and the socket's framing is what these tests check (the mailbox's own refusals are tested
    in `airlock-supervisor`, and garbage ahead of a mailed reply in test_hostile_peer.py)."""
    monkeypatch.setenv("AIRLOCK_LANE_MAIL", "off")


# case -> (target, args, the error's words, the counter that moves)
CALL_LANE = {
    "unexpected Pong": ("write_frame", ("pong",), r"unexpected Pong on the call lane"),
    "unexpected Welcome": ("write_frame", ("welcome",), r"unexpected Welcome on the call lane"),
    "unexpected Call": ("write_frame", ("call",), r"unexpected Call on the call lane"),
    "unexpected Shutdown": ("write_frame", ("shutdown",), r"unexpected Shutdown on the call"),
    "unexpected Ping": ("write_frame", ("ping",), r"unexpected Ping on the call lane"),
    "reply for another call": (
        "write_frame",
        ("reply for another call",),
        r"a reply for call \d+, not \d+",
    ),
    "event for a call never made": (
        "write_frame",
        ("event for a call never made",),
        r"an event for call \d+, never made",
    ),
    "segment: a regular file": (
        "forge_segment",
        ("regular file",),
        r"refused shared memory",
    ),
    "segment: an unsealed memfd": (
        "forge_segment",
        ("unsealed memfd",),
        r"refused shared memory: segment fd is not sealed",
    ),
    "segment: smaller than announced": (
        "forge_segment",
        ("smaller than announced",),
        r"the announcement said 262144",
    ),
    "200 fds in one write": (
        "forge_segment",
        ("200 fds in one write",),
        r"more than 8 file descriptors in one write",
    ),
    "reply: a host region never lent": (
        "forge_tensor",
        ("host", "reply"),
        r"referenced a region of ours it does not hold \(segment 4242",
    ),
    "reply: an unannounced worker segment": (
        "forge_tensor",
        ("unannounced", "reply"),
        r"Worker segment 4242, which was never announced",
    ),
    "reply: past the end of a worker segment": (
        "forge_tensor",
        ("outside", "reply"),
        r"region at offset 1099511627776 of 64 bytes lies outside segment",
    ),
    "event: a forged tensor": (
        "forge_tensor",
        ("unannounced", "event"),
        r"Worker segment 4242, which was never announced",
    ),
    "question: a forged tensor": (
        "forge_tensor",
        ("host", "question"),
        r"referenced a region of ours it does not hold",
    ),
}


def _moved(before: dict, after: dict) -> dict:
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _check_ended(w, pid: int, generation: int, before: dict, reason: str, leaks) -> None:
    assert _moved(before, _native.rejections()) == {reason: 1}
    assert _gone(pid), f"worker pid {pid} is still running after its refusal"
    assert w.call("fault_targets:echo", 7) == 7, "the next call failed"
    assert w.generation == generation + 1 and w.pid != pid, "not a new generation"
    assert leaks.check([w]) == []


@pytest.mark.parametrize("case", sorted(CALL_LANE))
def test_refused_input_on_the_call_lane_ends_the_worker(spawn, fault, leaks, case):
    target, args, words = CALL_LANE[case]
    run = fault(f"refused: {case}")
    w = spawn()
    w.call("fault_targets:echo", 0)
    leaks.baseline_threads()
    for i in range(iterations(2)):
        with run.iteration(i):
            pid, gen = w.pid, w.generation
            before = _native.rejections()
            with pytest.raises(comfy_airlock.ProtocolError, match=words) as info:
                w.call(f"forgeries:{target}", *args)
            msg = str(info.value)
            assert f"worker '{w.name}'" in msg and "the worker was ended" in msg, msg
            del info
            _check_ended(w, pid, gen, before, "protocol", leaks)
            run.outcome("refused once, worker ended, next call on a new generation")
    run.finish()


def test_refused_input_on_the_route_lane_ends_the_worker(spawn, fault, leaks):
    """The route lane (ADR 0055) is guarded as the call lane: what the worker sends there that
    the protocol forbids ends it, named as the route lane's."""
    run = fault("refused: unexpected Pong on the route lane")
    w = spawn()
    w.call("fault_targets:echo", 0)
    assert w.route_call("fault_targets:echo", 5) == 5  # the lane works
    leaks.baseline_threads()
    for i in range(iterations(2)):
        with run.iteration(i):
            pid, gen = w.pid, w.generation
            before = _native.rejections()
            with pytest.raises(comfy_airlock.ProtocolError, match="unexpected Pong on the route"):
                w.route_call("forgeries:write_route_frame", "pong")
            _check_ended(w, pid, gen, before, "protocol", leaks)
            run.outcome("refused once, worker ended, next call on a new generation")
    run.finish()


CONTROL_LANE = {
    "oversize header": ("frame_too_large", r"frame of 2147483647 bytes exceeds the limit"),
    "call": ("protocol", r"unexpected Call on the control lane"),
    "an fd": ("protocol", r"1 fd\(s\) on the control lane, which carries none"),
}


@pytest.mark.parametrize("kind", sorted(CONTROL_LANE))
def test_refused_input_on_the_control_lane_ends_the_worker(spawn, leaks, kind):
    """Liveness off: the host reads the control lane only for a ping (or a heartbeat or
    model command), and that read refuses it. Pings after it find no worker, and count
    nothing, until the next call starts one."""
    reason, words = CONTROL_LANE[kind]
    w = spawn()
    pid, gen = w.pid, w.generation
    before = _native.rejections()
    assert w.call("forgeries:write_control", kind) is True
    with pytest.raises(comfy_airlock.ProtocolError, match=words):
        w.ping(timeout=10.0)
    for _ in range(3):
        with pytest.raises(comfy_airlock.AirlockError, match="not running"):
            w.ping(timeout=1.0)
    _check_ended(w, pid, gen, before, reason, leaks)
    assert w.ping(timeout=10.0) > 0


@pytest.mark.parametrize("kind", sorted(CONTROL_LANE))
def test_refused_control_input_during_a_call_ends_it_at_once(spawn, leaks, kind):
    """Liveness on: its watcher reads the control lane while a call runs, refuses the frame
    and ends the worker; the call fails at once rather than when the node returns."""
    reason, words = CONTROL_LANE[kind]
    w = spawn(liveness=(0.05, 10.0))
    pid, gen = w.pid, w.generation
    before = _native.rejections()
    start = time.monotonic()
    with pytest.raises(comfy_airlock.ProtocolError, match=words) as info:
        w.call("forgeries:control_then_nap", kind, 60.0)
    assert time.monotonic() - start < 20.0, "the call waited for the node"
    del info
    _check_ended(w, pid, gen, before, reason, leaks)

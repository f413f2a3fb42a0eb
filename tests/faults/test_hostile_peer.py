"""A hostile worker: oversize, truncated and malformed frames on the call lane, a forged
release, a wrong token, a process that is not the spawned worker connecting to the handshake
socket. Each is refused with an error naming the worker and the cause, counted in
``comfy_airlock._native.rejections()``, and the next call (a fresh worker) succeeds."""

from __future__ import annotations

import struct

import pytest
from conftest import evil_python

import comfy_airlock
from comfy_airlock import _native

from .chaos import iterations


@pytest.fixture(autouse=True)
def _replies_through_the_socket(monkeypatch):
    """These workers write raw frames on the call lane's socket ahead of their reply, as a
    hostile worker would. A reply that goes by mail (ADR 0061) may be taken before bytes the
    lane never counted, so the refusal would come one call later: the mailboxes are off here,
    and the socket's framing is what these tests check (the mailbox's own refusals are tested
    in `airlock-supervisor`, and garbage ahead of a mailed reply below)."""
    monkeypatch.setenv("AIRLOCK_LANE_MAIL", "off")


def _frame(body: bytes) -> bytes:
    return struct.pack("<I", len(body)) + body


# What the worker writes ahead of its reply -> (the error's words, the counter that moves).
CORRUPT = {
    "oversize header": (
        b"\xff\xff\xff\x7f garbage",
        r"corrupt frame: frame of 2147483647 bytes exceeds the limit",
        "frame_too_large",
    ),
    "malformed body": (
        _frame(b"\xff" * 12),
        r"corrupt frame: malformed frame body",
        "malformed",
    ),
    "trailing bytes": (
        _frame(b"\x0b\x00\x00"),  # Shutdown (variant 11), then two bytes in the same frame
        r"corrupt frame: frame has 2 trailing bytes",
        "malformed",
    ),
}


@pytest.mark.parametrize("kind", sorted(CORRUPT))
def test_corrupt_frames_are_refused_and_counted(spawn, fault, leaks, kind):
    data, words, counter = CORRUPT[kind]
    run = fault(f"hostile worker: {kind}")
    w = spawn()
    w.call("fault_targets:echo", 0)
    leaks.baseline_threads()
    for i in range(iterations(4)):
        with run.iteration(i):
            before = _native.rejections()
            with pytest.raises(comfy_airlock.ProtocolError, match=words) as info:
                w.call("fault_targets:write_raw", data)
            assert f"worker '{w.name}'" in str(info.value)
            after = _native.rejections()
            assert after[counter] == before[counter] + 1, (before, after)
            assert not w.alive, "a worker that sent garbage is not trusted with another call"
            assert w.call("fault_targets:echo", i) == i
            run.outcome(f"refused ({counter})")
            run.check_leaks(i, leaks.check([w]))
    run.finish()


def test_garbage_ahead_of_a_mailed_reply_is_refused_when_the_socket_is_read(
    spawn, leaks, monkeypatch
):
    """With the mailboxes on, a reply by mail may be taken before bytes the worker wrote on
    the socket outside the lane's framing (ADR 0061): the host reads them, and refuses them,
    when it next reads the socket, here for a reply too large for the mailbox. Nothing of
    them reaches a caller, and the worker is ended as for any refused input."""
    monkeypatch.setenv("AIRLOCK_LANE_MAIL", "on")
    w = spawn()
    w.call("fault_targets:echo", 0)
    before = _native.rejections()["frame_too_large"]
    data = struct.pack("<I", 0xFFFFFFF0) + b"\0" * 12
    with pytest.raises(comfy_airlock.ProtocolError, match=r"exceeds the limit") as info:
        w.call("fault_targets:write_raw", data)
        w.call("fault_targets:echo", list(range(50000)))  # an inline reply over 100 KiB
    assert f"worker '{w.name}'" in str(info.value)
    assert _native.rejections()["frame_too_large"] == before + 1
    assert not w.alive
    assert w.call("fault_targets:echo", 1) == 1
    assert leaks.check([w]) == []


def test_truncated_frame_is_refused_and_counted(spawn, fault, leaks):
    run = fault("hostile worker: truncated frame")
    w = spawn()
    w.call("fault_targets:echo", 0)
    leaks.baseline_threads()
    for i in range(iterations(4)):
        with run.iteration(i):
            before = _native.rejections()["truncated"]
            partial = struct.pack("<I", 100) + b"\x02" * 10
            with pytest.raises(comfy_airlock.ProtocolError, match=r"stream ended inside a frame"):
                # The worker cuts its side of the lane after half a frame, and lingers.
                w.call("fault_targets:write_raw", partial, True, 30.0)
            assert _native.rejections()["truncated"] == before + 1
            assert w.call("fault_targets:echo", i) == i
            run.outcome("refused (truncated)")
            run.check_leaks(i, leaks.check([w]))
    run.finish()


def test_forged_release_is_refused_and_counted(spawn, leaks):
    w = spawn()
    w.call("fault_targets:echo", 0)
    before = _native.rejections()["protocol"]
    with pytest.raises(comfy_airlock.ProtocolError, match=r"protocol violation: bad release") as e:
        w.call("fault_targets:forge_release", 4242, 0, 64)
    assert f"worker '{w.name}'" in str(e.value)
    assert _native.rejections()["protocol"] == before + 1
    assert w.call("fault_targets:echo", 1) == 1
    assert leaks.check([w]) == []


def test_wrong_token_is_refused_and_counted(tmp_path, leaks):
    python = evil_python(
        tmp_path,
        """
        import os, sys
        from comfy_airlock import _native
        token = sys.stdin.readline().strip()
        bad = ("0" if token[0] != "0" else "1") + token[1:]
        try:
            _native.connect(os.environ["AIRLOCK_SOCKET"], bad, "3.11")
        except Exception as e:
            print("refused:", e, file=sys.stderr, flush=True)
        """,
    )
    before = _native.rejections()["bad_token"]
    with pytest.raises(comfy_airlock.HandshakeError, match=r"worker 'evil-token'.*wrong token"):
        comfy_airlock.Worker(python, name="evil-token", connect_timeout=10)
    assert _native.rejections()["bad_token"] == before + 1
    assert leaks.check() == []


def test_a_foreign_process_on_the_handshake_socket_is_refused_and_counted(tmp_path, leaks):
    """The spawned process hands the socket and the right token to another process (here its
    own child) and lets that one connect: SO_PEERCRED shows the wrong pid."""
    python = evil_python(
        tmp_path,
        """
        import os, subprocess, sys
        token = sys.stdin.readline().strip()
        helper = (
            "import os, sys; from comfy_airlock import _native; "
            "_native.connect(os.environ['AIRLOCK_SOCKET'], sys.argv[1], '3.11')"
        )
        subprocess.run([sys.executable, "-c", helper, token], stderr=subprocess.DEVNULL)
        """,
    )
    before = _native.rejections()["foreign_peer"]
    with pytest.raises(
        comfy_airlock.HandshakeError,
        match=r"worker 'evil-peer'.*refused: not the worker we started",
    ):
        comfy_airlock.Worker(python, name="evil-peer", connect_timeout=10)
    assert _native.rejections()["foreign_peer"] == before + 1
    assert leaks.check() == []

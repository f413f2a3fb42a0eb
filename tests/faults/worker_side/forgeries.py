"""What a hostile worker writes that our runtime never would: raw frames (messages the call
protocol forbids, segments that are not sealed memfds, a flood of fds), tensors whose
descriptors point at shared memory the worker does not have, garbage on the control lane, and
a worker that forges its reply and then stops reading its call lane.

The frames are postcard, as ``airlock-wire`` writes them: a little-endian u32 length, then the
message's variant index and fields, integers as LEB128 varints, strings with their length."""

from __future__ import annotations

import os
import signal
import socket
import stat
import struct
import tempfile
import time

import numpy as np

# --- frames -----------------------------------------------------------------------------------

# Message variant indices (crates/airlock-wire/src/message.rs, declaration order).
WELCOME, CALL, REPLY, SEGMENT, PING, PONG, SHUTDOWN, EVENT = 1, 3, 4, 6, 9, 10, 11, 12
NONE_VALUE = b"\x01\x00"  # a Value of one node, Node::None


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def text(s: str) -> bytes:
    data = s.encode()
    return varint(len(data)) + data


def str_value(s: str) -> bytes:
    return b"\x01" + varint(5) + text(s)  # one node, Node::Str


def frame(body: bytes) -> bytes:
    return struct.pack("<I", len(body)) + body


def _lane_fds() -> list[int]:
    """This process's call and control lane sockets, call lane first (the lanes connect in
    order: call, control, route, events)."""
    socks = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                socks.append(fd)
        except OSError:
            pass
    return sorted(socks)[:2]


def _call_id() -> int:
    from comfy_airlock.worker import link

    return link.LINK.call_id


def _frames(kind: str) -> bytes:
    cid = _call_id()
    never = cid + 1_000_000
    return {
        "pong": frame(bytes([PONG]) + varint(1)),
        "welcome": frame(bytes([WELCOME]) + varint(2) + text("evil")),
        "call": frame(bytes([CALL]) + varint(1) + text("os:getpid") + NONE_VALUE + NONE_VALUE),
        "shutdown": frame(bytes([SHUTDOWN])),
        "ping": frame(bytes([PING]) + varint(1)),
        "reply for another call": frame(bytes([REPLY]) + varint(never) + NONE_VALUE),
        "event for a call never made": frame(
            bytes([EVENT]) + varint(never) + text("progress") + NONE_VALUE
        ),
    }[kind]


def write_frame(kind: str) -> bool:
    """Writes the raw frame ``kind`` on the call lane, ahead of this call's reply."""
    os.write(_lane_fds()[0], _frames(kind))
    return True


def write_route_frame(kind: str) -> bool:
    """Writes the raw frame ``kind`` on the route lane (the third lane socket: the lanes
    connect in order), ahead of this route call's reply."""
    socks = sorted(int(n) for n in os.listdir("/proc/self/fd") if _is_socket(int(n)))
    os.write(socks[2], _frames(kind))
    return True


def _is_socket(fd: int) -> bool:
    try:
        return stat.S_ISSOCK(os.fstat(fd).st_mode)
    except OSError:
        return False


# --- segments and fds ------------------------------------------------------------------------


def _segment_frame(seg_id: int, length: int) -> bytes:
    return frame(bytes([SEGMENT]) + varint(seg_id) + varint(length))


def _send_with(data: bytes, fds: list[int]) -> None:
    # A duplicate of the lane's fd: closing it does not end the connection.
    with socket.socket(fileno=os.dup(_lane_fds()[0])) as sock:
        socket.send_fds(sock, [data], fds)


def forge_segment(kind: str) -> bool:
    """Announces a segment whose fd is not what the protocol allows: a regular file, a memfd
    without seals, a memfd smaller than announced; or attaches 200 fds to one write."""
    length = 1 << 16
    if kind == "regular file":
        with tempfile.TemporaryFile() as f:
            f.truncate(length)
            fd = os.dup(f.fileno())
    else:
        fd = os.memfd_create("airlock-worker-evil")  # no MFD_ALLOW_SEALING: never sealed
        os.ftruncate(fd, length)
    try:
        if kind == "200 fds in one write":
            _send_with(_segment_frame(90_000, length), [fd] * 200)
        elif kind == "smaller than announced":
            _send_with(_segment_frame(90_001, length * 4), [fd])
        else:
            _send_with(_segment_frame(90_002, length), [fd])
    finally:
        os.close(fd)
    return True


# --- forged tensor descriptors ------------------------------------------------------------------


_FORGED: dict[int, tuple] = {}


def _install_forger() -> None:
    """Makes the codec describe chosen arrays with a forged region (the core sends what the
    codec says)."""
    from comfy_airlock import values

    if getattr(values._encode_numpy, "forger", False):
        return
    real = values._encode_numpy

    def forging(lane, np_, a):
        region = _FORGED.get(id(a))
        if region is None:
            return real(lane, np_, a)
        return ("t", "numpy", "uint8", (64,), (1,), region, "cpu")

    forging.forger = True
    values._encode_numpy = forging


def forged_array(where: str) -> np.ndarray:
    """An array that will be sent as a tensor of 64 bytes at a region the worker does not
    have: ``host`` (a host region never lent), ``unannounced`` (a worker segment never
    announced), ``outside`` (past the end of a real worker segment)."""
    from comfy_airlock.worker import link

    _install_forger()
    a = np.zeros(64, dtype=np.uint8)
    if where == "host":
        region = (0, 4242, 0, 64)
    elif where == "unannounced":
        region = (1, 4242, 0, 64)
    else:
        side, seg, _, _ = link.LINK.lane.alloc(4096)  # announced with the frame
        region = (side, seg, 1 << 40, 64)
    _FORGED[id(a)] = region
    return a


KEEP = []


def forge_tensor(where: str, how: str):
    """Sends a forged tensor ``how``: as the reply, inside an event, or inside a question."""
    from comfy_airlock.worker import runtime

    a = forged_array(where)
    KEEP.append(a)  # its id must stay its own until it is encoded
    if how == "event":
        runtime.emit("preview", {"image": a})
        time.sleep(30)  # the host ends this worker at the event
    elif how == "question":
        # A question whose payload is a value (the memory questions are typed and carry no
        # tensor: crates/airlock-wire/src/memory.rs).
        runtime.ask("forged?", {"tensor": a})
        time.sleep(30)
    return {"out": a}


# --- the control lane -------------------------------------------------------------------------


def write_control(kind: str) -> bool:
    """Writes garbage (an oversize header), a message the host never asks for (a Call), or a
    Pong with an fd attached on the control lane."""
    control = _lane_fds()[1]
    if kind == "an fd":
        fd = os.memfd_create("airlock-worker-evil")
        try:
            with socket.socket(fileno=os.dup(control)) as sock:
                socket.send_fds(sock, [frame(bytes([PONG]) + varint(0))], [fd])
        finally:
            os.close(fd)
        return True
    data = {
        "oversize header": b"\xff\xff\xff\x7f garbage",
        "call": frame(bytes([CALL]) + varint(1) + text("os:getpid") + NONE_VALUE + NONE_VALUE),
    }[kind]
    os.write(control, data)
    return True


def control_then_nap(kind: str, seconds: float) -> float:
    write_control(kind)
    time.sleep(seconds)
    return seconds


# --- a worker that stops reading --------------------------------------------------------------


def forge_reply_then_hang(seconds: float) -> None:
    """Answers this call with a forged reply ("forged") on the raw lane, then stays in C code
    with SIGINT blocked: the worker reads no further call, as one stuck in a library would."""
    reply = frame(bytes([REPLY]) + varint(_call_id()) + str_value("forged"))
    os.write(_lane_fds()[0], reply)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    time.sleep(seconds)


def question_then_hang(seconds: float) -> None:
    """Asks the host a question on the raw lane and never reads the answer: stays in C code
    with SIGINT blocked."""
    ask = frame(bytes([EVENT]) + varint(_call_id()) + text("admit?") + NONE_VALUE)
    os.write(_lane_fds()[0], ask)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    time.sleep(seconds)

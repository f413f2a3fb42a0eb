"""What the fault suite runs inside workers: calls of chosen length, tensor transfers, a pack's
own models, and the misbehaviours of hostile or broken packs (exits mid-call, forks, garbage on
stdout, raw bytes on the call lane). Needs numpy only, so a respawn costs no torch import."""

from __future__ import annotations

import os
import random
import socket
import stat
import sys
import time

import numpy as np

# --- plain calls and transfers ----------------------------------------------------------------


def echo(x):
    return x


def spin(seconds):
    """Busy in Python bytecode for ``seconds`` (a node computing)."""
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return seconds


def nap(seconds):
    """Blocked in C for ``seconds`` (a node waiting on I/O or a kernel)."""
    time.sleep(seconds)
    return seconds


def checksum(a):
    """Reads one byte per page of ``a`` (every page of the region is touched)."""
    return int(np.asarray(a).reshape(-1)[::4096].astype(np.int64).sum())


def make(nbytes, fill):
    return np.full(nbytes, fill, dtype=np.uint8)


KEPT = []


def keep(*arrays):
    """Holds arrays (the host's regions stay leased) until :func:`drop`."""
    KEPT.extend(arrays)
    return len(KEPT)


def drop():
    KEPT.clear()
    return True


def lane_stats():
    """This worker's call-lane pool counters."""
    from comfy_airlock.worker import link

    return dict(link.LINK.lane.stats())


# --- a pack's own models (numpy weights, the surface register_model reads) ---------------------


class _Param:
    def __init__(self, nbytes):
        self.data = np.zeros(nbytes // 4, dtype=np.float32)
        self.device = "cpu"

    def numel(self):
        return self.data.size

    def element_size(self):
        return self.data.itemsize


class NumpyModel:
    """A model a pack keeps outside torch: ``parameters()`` of numpy arrays."""

    def __init__(self, parts, nbytes):
        self._params = [_Param(nbytes // parts) for _ in range(parts)]

    def parameters(self):
        return iter(self._params)

    def buffers(self):
        return iter(())


MODELS = {}


def make_models(count, parts, nbytes):
    """Registers ``count`` models (``parts`` tensors, ``nbytes`` each) on the CPU; returns
    ``{name: model id}``."""
    from comfy_airlock.worker import models

    out = {}
    for _ in range(count):
        name = f"m{len(MODELS)}"
        MODELS[name] = NumpyModel(parts, nbytes)
        out[name] = models.register_model(MODELS[name], name=name, device="cpu")
    return out


def models_report():
    """The registry's truth: ``{model id: resident bytes}``, and this worker's pid."""
    from comfy_airlock.worker import models

    rep = models.report()
    return {"pid": rep["pid"], "models": {int(r["id"]): int(r["resident"]) for r in rep["models"]}}


# --- broken packs -----------------------------------------------------------------------------


def exit_mid_call(code, after, words):
    """Says ``words`` on stderr, works for ``after`` seconds, then ``os._exit(code)``."""
    print(words, file=sys.stderr, flush=True)
    spin(after)
    os._exit(code)


def garbage(seed, nbytes, fd=1, newlines=True):
    """Writes ``nbytes`` of raw random bytes to ``fd`` (invalid UTF-8, NULs, escapes),
    bypassing Python's text layer; without ``newlines`` it is one endless line (no ``\\n``, and
    no ``\\r``, which ends a redrawn piece of it too)."""
    rng = random.Random(seed)
    data = bytes(rng.getrandbits(8) for _ in range(min(nbytes, 4096)))
    if not newlines:
        data = data.replace(b"\n", b"x").replace(b"\r", b"x")
    data = (data * (nbytes // len(data) + 1))[:nbytes] if data else b""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
    return nbytes


def fork(mode, seconds=0.0):
    """Forks, the way packs do (multiprocessing's fork start method, a library spawning a
    helper). What the child does:

    - ``exit``: ``os._exit(0)`` at once; the parent reaps it;
    - ``return``: returns from this function, as a careless fork does, into the worker's own
      call loop, which must refuse it the host's connection;
    - ``emit``: sends an event on the parent's call lane, which must be refused;
    - ``sleep``: outlives the call, sleeping ``seconds``; it must not outlive the worker.

    Returns the parent's pid and the child's."""
    pid = os.fork()
    if pid == 0:
        if mode == "exit":
            os._exit(0)
        if mode == "return":
            return {"pid": os.getpid(), "child": 0, "from": "child"}
        if mode == "emit":
            from comfy_airlock.worker import runtime

            try:
                runtime.emit("progress", (1, 2, None))
                os._exit(3)  # the event went out: the parent's lane is confused
            except Exception as e:
                print(f"child refused: {e}", file=sys.stderr, flush=True)
                os._exit(0)
        time.sleep(seconds)
        os._exit(0)
    if mode in ("exit", "emit"):
        os.waitpid(pid, 0)
    return {"pid": os.getpid(), "child": pid, "from": "parent"}


def reap():
    """Reaps exited children, as a pack that forks should."""
    n = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return n
        if pid == 0:
            return n
        n += 1


# --- a hostile peer on the call lane ------------------------------------------------------------


def _call_lane_fd():
    """The call lane's socket: the first of this process's two lane sockets (connected first)."""
    socks = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                socks.append(fd)
        except OSError:
            pass
    return sorted(socks)[0]


def write_raw(data, then_close=False, then_sleep=0.0):
    """Writes ``data`` on the call lane's socket, ahead of this call's reply (which may go by
    mail, ADR 0061); optionally shuts the
    lane's writing side (the host sees the stream end inside a frame) and lingers."""
    fd = _call_lane_fd()
    os.write(fd, data)
    if then_close:
        socket.socket(fileno=os.dup(fd)).shutdown(socket.SHUT_WR)
    if then_sleep:
        time.sleep(then_sleep)
    return len(data)


def forge_release(segment, offset, length):
    """Queues a release of a host region this worker never received; it rides with the reply."""
    from comfy_airlock.worker import link

    link.LINK.lane.release(0, segment, offset, length)
    return True


# --- a hostile peer's shared memory -------------------------------------------------------------


def _varint(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


SEGMENT_VARIANT = 6  # Message::Segment in the wire's enum order


def announce_segments(count, nbytes, first_id=1000):
    """Announces ``count`` segments of ``nbytes`` with raw ``Segment`` frames, each with its
    fd: memfds that are sealed as the host requires but sparse (``ftruncate``, not one page
    allocated), named like the worker's own so the leak checker counts them. Stops quietly
    when the host hangs up (it refuses what it must). Returns how many went out."""
    import fcntl
    import struct

    sock = socket.socket(fileno=os.dup(_call_lane_fd()))
    sent = 0
    try:
        for i in range(count):
            sid = first_id + i
            fd = os.memfd_create(f"airlock-worker-{os.getpid()}-{sid}", os.MFD_ALLOW_SEALING)
            try:
                os.ftruncate(fd, nbytes)
                seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
                body = bytes([SEGMENT_VARIANT]) + _varint(sid) + _varint(nbytes)
                frame = struct.pack("<I", len(body)) + body
                rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))]
                sock.sendmsg([frame], rights)
                sent += 1
            except OSError:
                return sent  # the host refused and closed the lane
            finally:
                os.close(fd)
    finally:
        sock.close()
    return sent


def sparse_tensor(nbytes, segment_id, length=16):
    """Announces one sparse segment of ``nbytes`` and returns a ``length``-byte tensor whose
    descriptor points at its start: the encoder is made to describe the forged region instead
    of copying into the worker's own pool (once, then it is put back)."""
    from comfy_airlock import values

    announce_segments(1, nbytes, segment_id)
    honest = values._encode_numpy

    def forged(lane, np_, a):
        values._encode_numpy = honest
        region = (1, segment_id, 0, length)
        return ("t", "numpy", "uint8", (length,), (1,), region, "cpu")

    values._encode_numpy = forged
    return np.zeros(length, dtype=np.uint8)


def make_bytes(nbytes, fill):
    return bytes([fill]) * nbytes


def make_text(nchars, char):
    return char * nchars


def many_ints(n):
    return list(range(n))


def nested(levels):
    v = 7
    for _ in range(levels):
        v = [v]
    return v


def pid():
    return os.getpid()

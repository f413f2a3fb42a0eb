"""The plain baseline for bench/compare.py: a worker process that reads pickled calls from a
socketpair and writes pickled results back, the way a minimal hand-made isolation does it.

    python bench/pickle_worker.py FD

Framing: an 8-byte little-endian length, then ``pickle.dumps((function_name, args))`` with the
default protocol; the answer is ``(True, result)`` or ``(False, "Type: message")``. Functions
are ``bench_targets``'. Tensors cross by torch's own pickling (their bytes inside the frame).
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import sys
import traceback

HEADER = struct.Struct("<Q")


def recv_exact(sock: socket.socket, n: int) -> bytearray | None:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            return None
        got += k
    return buf


def send(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(HEADER.pack(len(payload)))
    sock.sendall(payload)


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_targets

    while True:
        head = recv_exact(sock, HEADER.size)
        if head is None:
            return
        (n,) = HEADER.unpack(head)
        body = recv_exact(sock, n)
        if body is None:
            return
        name, args = pickle.loads(body)
        try:
            out = (True, getattr(bench_targets, name)(*args))
        except Exception as e:
            traceback.print_exc()
            out = (False, f"{type(e).__name__}: {e}")
        del body, args
        send(sock, pickle.dumps(out))


if __name__ == "__main__":
    main()

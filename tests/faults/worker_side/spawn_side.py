"""What the spawn fault cases look at inside a worker: the descriptors it started with (taken
when this module is preloaded, before the worker connects), the ones it holds in a call, and
whether it is dumpable."""

from __future__ import annotations

import ctypes
import os

PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4


def _fds() -> dict[int, tuple[str, int, int]]:
    """fd -> (link, st_dev, st_ino) of every descriptor this process has open."""
    out = {}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
            st = os.stat(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own directory, closed by now
        out[fd] = (link, st.st_dev, st.st_ino)
    return out


AT_START = _fds()


def at_start():
    return AT_START


def now():
    return _fds()


def dumpable() -> int:
    return ctypes.CDLL(None, use_errno=True).prctl(PR_GET_DUMPABLE, 0, 0, 0, 0)


def set_dumpable(on: bool) -> int:
    """Undoes the runtime's PR_SET_DUMPABLE 0 (the control case of the sibling test)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, int(on), 0, 0, 0)
    return dumpable()


def drop_capabilities() -> str:
    """Makes this worker an ordinary same-user process (see take_fd.py)."""
    from take_fd import drop_capabilities as drop

    return drop()


def lane_fds() -> list[int]:
    """The worker's connected sockets: its call, control, route and events lanes (made after
    it started)."""
    return sorted(fd for fd, (link, _, _) in _fds().items() if link.startswith("socket:"))

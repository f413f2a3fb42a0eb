"""A same-user process that is not a worker's parent (a sibling worker gone hostile) tries to
take descriptors of worker ``pid`` with ``pidfd_getfd`` and to read its ``/proc`` entries.

Run as root, it first drops every capability: it is then uid 0 like the worker but without
``CAP_SYS_PTRACE``, exactly what an ordinary user's process is to another of the same user.
(The worker under test drops its own first, with the same function: the kernel also refuses
a caller whose capabilities are not a superset of its target's, whatever the target's
dumpable flag, which would make the test pass for the wrong reason.)
Prints JSON: ``{"caps": ..., "fds": {fd: errno or 0}, "environ": errno or 0}``."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import sys

SYS_pidfd_getfd = 438
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]


PR_CAPBSET_DROP = 24


def drop_capabilities() -> str:
    """Drops every capability, the bounding set first (so an exec cannot regain them);
    returns the effective set left, as /proc shows it (all zeros)."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EPERM once CAP_SETPCAP is gone: harmless
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    with open("/proc/self/status") as f:
        return next(line.split()[1] for line in f if line.startswith("CapEff:"))


def take(pidfd: int, fd: int) -> int:
    got = libc.syscall(SYS_pidfd_getfd, pidfd, fd, 0)
    if got < 0:
        return ctypes.get_errno()
    os.close(got)
    return 0


def main() -> None:
    pid, fds = int(sys.argv[1]), [int(a) for a in sys.argv[2:]]
    caps = drop_capabilities()
    pidfd = os.pidfd_open(pid)
    result = {"caps": caps, "fds": {fd: take(pidfd, fd) for fd in fds}}
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            f.read()
        result["environ"] = 0
    except OSError as e:
        result["environ"] = e.errno or errno.EIO
    print(json.dumps(result))


if __name__ == "__main__":
    main()

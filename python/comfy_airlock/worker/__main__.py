import time

# When this interpreter reached our code (CLOCK_BOOTTIME, comparable across processes): the
# start of the worker's timeline (runtime.START_MARKS, bench/cold_start.py).
_BOOT = time.clock_gettime(time.CLOCK_BOOTTIME)

# First, before any other import of ours or of the pack: a sibling worker of the same user must
# never take this worker's descriptors (pidfd_getfd) or ptrace it (docs/security.md).
from comfy_airlock import _native  # noqa: E402

_native.forbid_same_user_access()

from comfy_airlock.worker.runtime import START_MARKS, main  # noqa: E402

START_MARKS["interpreter"] = _BOOT
main()

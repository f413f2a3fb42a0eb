"""How a worker's C heap keeps the memory its operators free while it is busy (ADR 0040).

torch allocates each operator's output with ``malloc``. glibc serves blocks up to its mmap
threshold from its heap, and gives the heap's free top back to the system as soon as it
exceeds the trim threshold; both thresholds grow with the blocks freed (the threshold tops
out at 32 MiB on 64-bit, the trim threshold at twice the threshold). A worker runs a node on
its main thread, whose heap holds little else: a node's intermediates (a 1024x1024 IMAGE is
12 MiB a tensor) freed at its end left the heap's whole top free, glibc gave it back, and the
next node faulted it in again page by page. In an image-filter prompt over HTTP the worker
took 6,300-10,700 page faults a prompt where ComfyUI running the same nodes took 4,300-6,000
(docs/benchmarks.md); each is a trip into the kernel and a page zeroed.

So a worker starts with glibc's heap keeping up to :data:`TRIM_BYTES` of free top, and the
threshold fixed at glibc's own ceiling (:data:`MMAP_BYTES`: setting one fixes the other, so
both are set; ComfyUI's process reaches the same threshold after its first large free). The
memory kept is returned when the worker is idle or the machine short of RAM: the idle trim
calls ``malloc_trim`` (``idle_trim.py``, ADR 0028), and the worker's resident set, kept
memory included, is what its memory report counts. A worker whose environment already sets
any of glibc's heap knobs (a pack's ``[env_vars]``, the operator's ``worker_env``, a
``GLIBC_TUNABLES`` naming one) keeps its own. Only on Linux; a C library other than glibc
(musl) ignores these variables, and the Windows product never sets them.
"""

from __future__ import annotations

import sys
from collections.abc import MutableMapping

#: glibc's variables for the knobs this sets or that fix the threshold; any present wins.
HEAP_KNOBS = (
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
)
#: The same knobs as glibc tunables (``GLIBC_TUNABLES=glibc.malloc.trim_threshold=...``).
TUNABLES = ("trim_threshold", "mmap_threshold", "top_pad", "mmap_max")
#: Free heap top kept while busy: eight blocks at the threshold.
TRIM_BYTES = 256 << 20
#: glibc's ceiling for the threshold on 64-bit (``DEFAULT_MMAP_THRESHOLD_MAX``); larger
#: blocks are mapped and unmapped one by one, as in ComfyUI's process.
MMAP_BYTES = 32 << 20


def _tuned(env: MutableMapping[str, str]) -> bool:
    if any(k in env for k in HEAP_KNOBS):
        return True
    tunables = env.get("GLIBC_TUNABLES", "")
    return any(f"glibc.malloc.{t}=" in tunables for t in TUNABLES)


def apply(env: MutableMapping[str, str], platform: str = sys.platform) -> None:
    """Sets the worker's heap knobs in ``env`` unless it sets one of them itself (Linux only:
    elsewhere there is no glibc to read them)."""
    if platform.startswith("linux") and not _tuned(env):
        env["MALLOC_TRIM_THRESHOLD_"] = str(TRIM_BYTES)
        env["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_BYTES)

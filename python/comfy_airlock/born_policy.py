"""Which workers start with ``libairlock_born.so`` preloaded, so that their outputs are born
in shared memory (ADR 0044).

A worker copies each fresh output into its pool once, after the node made it in its private
heap: at 1 MiB that copy and the faults of fresh heap pages are most of a call. With the
library preloaded, torch's CPU blocks of at least :data:`MIN_BYTES` made on the thread running
a call (a node, or the pack's import, which runs inside a call) are leased from the pool
instead (``crates/airlock-py/preload/born.c``, ``crates/airlock-py/src/born.rs``), and an
output is sent as a reference to the region its kernel wrote. The host puts the library first
in the worker's ``LD_PRELOAD`` and keeps what was there (a pack's ``[env_vars]``, or the
user's own with ``INHERIT_ENV``) in a variable of its own (``settings.ENV["worker_ld_preload"]``);
the worker puts that back into its environment as soon as it starts (:func:`restore`), so no
process the pack starts inherits the library.

Linux only, and only where the wheel carries the library; a budget of 0 (the ``born_budget``
setting) turns it off (a pack's ``[env_vars]`` may say so for its worker alone). The Windows
product never takes this path: its outputs are copied once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

from comfy_airlock import settings

#: The library, beside the extension module (both come in the wheel).
LIBRARY = Path(__file__).resolve().parent / "libairlock_born.so"
#: Smallest block born. Chosen, not measured: each birth takes the pool's lock and a 4 KiB
#: aligned lease, so a node's small temporaries are left to glibc's heap.
MIN_BYTES = 256 << 10


def apply(env: MutableMapping[str, str], platform: str = sys.platform) -> None:
    """Preloads the library in the worker whose environment is ``env``, if it may."""
    if not platform.startswith("linux") or not LIBRARY.is_file():
        return
    if settings.parse("born_budget", env) <= 0:
        return
    theirs = env.get("LD_PRELOAD", "")
    env[settings.ENV["worker_ld_preload"]] = theirs
    env["LD_PRELOAD"] = f"{LIBRARY} {theirs}".strip()


def restore(environ: MutableMapping[str, str] = os.environ) -> None:
    """In a worker, first thing: gives ``LD_PRELOAD`` back what it was before :func:`apply`."""
    name = settings.ENV["worker_ld_preload"]
    if name not in environ:
        return
    theirs = environ.pop(name)
    if theirs:
        environ["LD_PRELOAD"] = theirs
    else:
        environ.pop("LD_PRELOAD", None)


def enable(worker_link) -> bool:
    """In a worker: lets its nodes' outputs be born in its call lane's pool; False when the
    library is not preloaded (not Linux, turned off, or a wheel without it)."""
    budget = settings.get().born_budget
    return budget > 0 and worker_link.enable_births(MIN_BYTES, budget)

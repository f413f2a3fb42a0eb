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

numpy takes its arrays' data from ``malloc``, which the library leaves alone; once numpy is
imported in the worker, :func:`numpy_births` gives numpy the library's data allocator (NEP 49,
ADR 0045), so an output made with numpy (an image through PIL or OpenCV, then
``torch.from_numpy``) is born too.

Linux only, and only where the wheel carries the library; a budget of 0 (the ``born_budget``
setting) turns it off (a pack's ``[env_vars]`` may say so for its worker alone). The Windows
product never takes this path: its outputs are copied once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

from comfy_airlock import _native, settings

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


#: numpy's compiled core, which holds its C API table: numpy 2, then numpy 1.
_NUMPY_CORE = ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath")


def numpy_births(_numpy: object = None) -> str:
    """In a worker whose births are on, once numpy is imported (the worker's import hook calls
    it): numpy's arrays made on the thread running a call are born too, through the data
    allocator the library holds (ADR 0045), set for this thread's context, which every call
    runs in. What happened: ``"installed"``, ``"foreign"`` (a pack's own allocator, left
    alone), ``"unsupported"`` (numpy before 1.22), ``"off"``, or ``"no numpy"``."""
    core = next((sys.modules[n] for n in _NUMPY_CORE if n in sys.modules), None)
    if core is None:
        return "no numpy"
    return _native.born_numpy(core._ARRAY_API)

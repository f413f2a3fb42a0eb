"""How a worker's OpenMP threads wait between parallel regions (ADR 0028).

torch's CPU operators run on OpenMP threads, and OpenMP's default wait policy keeps a thread
spinning for a while after its work is done, in case more comes (libgomp: 300,000 spins;
Intel's runtime: 200 ms). In one process on a machine of its own that saves a wake-up. A worker
is never alone: the host waits to be woken with its reply, and other workers and ComfyUI itself
need the same cores. On 2 cores a worker's spinning threads made a 1 MiB fresh output cost
12.9 ms instead of 0.47 ms (issue 20), and even the worker's own next operator waits behind
them under load (docs/benchmarks.md has the measured rows).

So a worker's OpenMP threads sleep as soon as they are idle (``OMP_WAIT_POLICY=PASSIVE``, which
libgomp and Intel's runtime both read), unless the worker's environment already says how they
should wait: a pack's ``[env_vars]`` or the operator's own ``OMP_WAIT_POLICY``,
``GOMP_SPINCOUNT``, ``KMP_BLOCKTIME`` or ``KMP_LIBRARY`` win. Thread counts are left alone: a
worker's large operators keep every core.
"""

from __future__ import annotations

from collections.abc import MutableMapping

#: Settings that say how OpenMP threads wait; any of them present leaves the choice to it.
WAIT_KNOBS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "KMP_LIBRARY")


def apply(env: MutableMapping[str, str]) -> None:
    """Sets the worker's default wait policy in ``env`` unless it sets one itself."""
    if not any(k in env for k in WAIT_KNOBS):
        env["OMP_WAIT_POLICY"] = "PASSIVE"

"""The shared-memory pool runs full (``AIRLOCK_SHM_LIMIT_MIB``, here 96 MiB per side): the call
that does not fit fails with an error naming the pool and the limit, leaves nothing leased
behind, and the next call succeeds; the same on the worker's side with a result too big."""

from __future__ import annotations

import numpy as np
import pytest

import comfy_airlock

from .chaos import iterations

MIB = 1 << 20


def test_pool_full(spawn, fault, leaks, monkeypatch):
    run = fault("memfd pool full (host and worker side)")
    # Read when each side configures its pool: the host now, the worker at its connect.
    monkeypatch.setenv("AIRLOCK_SHM_LIMIT_MIB", "96")
    w = spawn()
    block = np.ones(32 * MIB, dtype=np.uint8)  # one 32 MiB segment each
    leaks.baseline_threads()
    for i in range(iterations(5)):
        with run.iteration(i):
            # Fill our pool: the worker keeps what it is sent, so the regions stay leased.
            assert w.call("fault_targets:keep", block, block) == 2
            assert w.call("fault_targets:keep", block) == 3
            stats = w.lane.stats()
            assert stats["segment_bytes"] == 96 * MIB and stats["leased_regions"] == 3
            with pytest.raises(comfy_airlock.AirlockError) as info:
                w.call("fault_targets:keep", np.ones(MIB, dtype=np.uint8))
            msg = str(info.value)
            assert f"pool 'airlock-{w.name}' is full" in msg, msg
            assert "AIRLOCK_SHM_LIMIT_MIB" in msg, msg
            assert w.lane.stats()["leased_regions"] == 3, "the failed call leased nothing"
            run.outcome("host pool full: refused")
            # The next call succeeds; once the worker lets go, so do transfers again.
            assert w.call("fault_targets:drop") is True
            assert w.call("fault_targets:checksum", block) == len(range(0, 32 * MIB, 4096))
            # The worker's pool is as small: a result that does not fit fails there.
            with pytest.raises(comfy_airlock.AirlockError) as info:
                w.call("fault_targets:make", 128 * MIB, 1)
            msg = str(info.value)
            assert f"pool 'airlock-worker-{w.pid}' is full" in msg, msg
            run.outcome("worker pool full: refused")
            got = w.call("fault_targets:make", 16 * MIB, 2)
            assert got[::4096].min() == got[::4096].max() == 2
            del got
            assert w.call("fault_targets:lane_stats")["leased_regions"] == 0
            run.check_leaks(i, leaks.check([w]))
    run.finish()

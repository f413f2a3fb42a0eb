"""The RAM budget's split (host/ram.py): the host's pins plus the workers' ceilings never exceed
the budget, room is shared equally, and cuts fall on idle workers first, largest first."""

from __future__ import annotations

import random

from comfy_airlock.host.memory.ram import Holder, budget, split

MIB = 1 << 20


def test_budget_is_upstreams_ratio_of_the_total():
    assert budget(100 * MIB, windows=False) == 90 * MIB
    assert budget(100 * MIB, windows=True) == 40 * MIB


def test_room_is_shared_equally_on_top_of_what_each_holds():
    c = split(1000, 100, {"a": Holder(300), "b": Holder(100)})
    # room = 1000 - 100 - 400 = 500: 250 each
    assert c == {"a": 550, "b": 350}


def test_over_budget_cuts_idle_workers_first_then_the_largest_busy_one():
    held = {"busy1": Holder(400, idle=False), "busy2": Holder(100, idle=False), "idle": Holder(300)}
    # allowance 1000 - 400 = 600: the busy ones keep their 500, the idle one gets 100
    assert split(1000, 400, held) == {"busy1": 400, "busy2": 100, "idle": 100}
    # allowance 300: the idle one goes to 0; the busy ones are water-filled (level 200)
    assert split(1000, 700, held) == {"busy1": 200, "busy2": 100, "idle": 0}


def test_host_over_the_budget_leaves_workers_nothing():
    assert split(1000, 1500, {"a": Holder(10), "b": Holder(0, idle=False)}) == {"a": 0, "b": 0}


def test_no_workers():
    assert split(1000, 0, {}) == {}


def test_the_sum_never_exceeds_the_budget():
    """A seeded property loop over random budgets, host pins and worker holdings."""
    rng = random.Random(20240611)
    for _ in range(20000):
        limit = rng.randrange(0, 1 << 36)
        host = rng.choice([0, rng.randrange(0, limit + 1), rng.randrange(0, 2 * limit + 2)])
        n = rng.randrange(1, 7)
        workers = {
            f"w{i}": Holder(
                rng.choice([0, rng.randrange(0, limit + 1), rng.randrange(0, 3 * limit + 3)]),
                idle=rng.random() < 0.5,
            )
            for i in range(n)
        }
        c = split(limit, host, workers)
        assert set(c) == set(workers)
        assert all(v >= 0 for v in c.values())
        if host <= limit:
            assert host + sum(c.values()) <= limit, (limit, host, workers, c)
        else:
            assert sum(c.values()) == 0
        room = limit - host - sum(h.pinned for h in workers.values())
        if room >= 0:
            # Nobody is asked to unpin while there is room, and the room is all given out
            # (but for the rounding of the equal share).
            assert all(c[k] >= h.pinned for k, h in workers.items())
            assert limit - host - sum(c.values()) < n
        else:
            assert all(c[k] <= h.pinned for k, h in workers.items())
            # The allowance is used (but for rounding): cuts are no deeper than needed.
            assert max(0, limit - host) - sum(c.values()) < n
            busy_cut = any(c[k] < h.pinned for k, h in workers.items() if not h.idle)
            if busy_cut:  # a busy worker is only cut when every idle one is at zero
                assert all(c[k] == 0 for k, h in workers.items() if h.idle)

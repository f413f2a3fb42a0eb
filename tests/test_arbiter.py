"""The host's eviction arbiter from Python (``_native.Arbiter``, crates/airlock-arbiter):
the policy's order, stopping at the minimum, refusals, errors from the callbacks, holds, and
two Python threads contending for the single flight (the waiter releases the GIL, so the
holder's Python callbacks keep running).

The card here is a plain Python object: free memory moves only by what evictions free. The
Rust crate's own tests cover the policy exhaustively (property tests) and the single flight
under the loom model checker (scripts/loom.sh).
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest

from comfy_airlock._native import AirlockError, Arbiter, ArbiterError

MIB = 1 << 20


def cand(owner: str, model: int, resident: int, last_used: float = 0.0, **flags: Any) -> dict:
    return {
        "owner": owner,
        "generation": 1,
        "model": model,
        "resident": resident,
        "last_used": last_used,
        "owner_idle": flags.pop("owner_idle", True),
        **flags,
    }


class Card:
    """Free memory and what each model holds; evictions free what they are asked (all of a
    model, or ``want`` of one that may be unloaded in part)."""

    def __init__(self, free: int, candidates: list[dict]) -> None:
        self.free = free
        self.resident = {(c["owner"], c["model"]): c["resident"] for c in candidates}
        self.asked: list[tuple[str, int, int]] = []
        self.reads = 0
        self.refuse: dict[tuple[str, int], Any] = {}

    def true_free(self) -> int:
        self.reads += 1
        return self.free

    def evict(self, c: dict, want: int) -> int | None:
        key = (c["owner"], c["model"])
        self.asked.append((c["owner"], c["model"], want))
        how = self.refuse.get(key)
        if isinstance(how, BaseException):
            raise how
        if key in self.refuse:
            return None
        freed = min(want, self.resident[key])
        self.resident[key] -= freed
        self.free += freed
        return freed


def wait_until(cond: Any, what: str) -> None:
    # A liveness bound (the condition holds within milliseconds), not a latency assertion.
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def test_plan_follows_the_policy() -> None:
    cands = [
        cand("busy", 1, MIB, 1.0, owner_idle=False),
        cand("idle", 2, MIB, 9.0),
        cand("idle", 3, MIB, 2.0),
        cand("me", 4, MIB, 0.0, owner_idle=False, owner_is_requester=True),
        cand("busy", 5, MIB, 5.0, owner_idle=False),
        cand("busy", 6, MIB, 0.0, in_use=True),
        cand("idle", 7, 0, 0.0),
    ]
    # Idle workers' models (least recently used first), then busy ones', then the
    # requester's; never the model in use, nor one that holds nothing.
    assert Arbiter.plan(100 * MIB, 0, cands) == [2, 1, 0, 4, 3]
    # Just enough: the prefix that covers the shortfall.
    assert Arbiter.plan(2 * MIB, 0, cands) == [2, 1]
    assert Arbiter.plan(MIB, MIB, cands) == []


def test_stops_at_the_minimum_and_reports_each_step() -> None:
    cands = [cand("a", 1, 4 * MIB, 1.0), cand("b", 2, 4 * MIB, 2.0), cand("c", 3, 4 * MIB, 3.0)]
    card = Card(MIB, cands)
    arbiter = Arbiter()
    out = arbiter.free_room(6 * MIB, cands, card.true_free, card.evict)
    assert out["satisfied"] is True
    assert [(s["owner"], s["asked"], s["freed"], s["refused"]) for s in out["steps"]] == [
        ("a", 4 * MIB, 4 * MIB, None),
        ("b", 4 * MIB, 4 * MIB, None),
    ]
    assert out["steps"][0]["candidate"] is cands[0]  # the caller's own dict comes back
    assert (out["free_before"], out["free_after"], out["freed"]) == (MIB, 9 * MIB, 8 * MIB)
    assert card.reads == 3  # the truth is re-read after every step
    assert out["hold"] is None


def test_never_evicts_when_free_already_suffices() -> None:
    cands = [cand("a", 1, 4 * MIB)]
    card = Card(8 * MIB, cands)
    out = Arbiter().free_room(8 * MIB, cands, card.true_free, card.evict)
    assert out["steps"] == [] and out["satisfied"]
    assert card.asked == []


def test_partial_unload_asks_only_the_shortfall() -> None:
    cands = [cand("a", 1, 100 * MIB, partial_ok=True)]
    card = Card(10 * MIB, cands)
    out = Arbiter().free_room(25 * MIB, cands, card.true_free, card.evict)
    assert card.asked == [("a", 1, 15 * MIB)]
    assert out["free_after"] == 25 * MIB


def test_refusals_are_skipped_and_named() -> None:
    cands = [cand("a", 1, 4 * MIB, 1.0), cand("b", 2, 4 * MIB, 2.0), cand("c", 3, 4 * MIB, 3.0)]
    card = Card(0, cands)
    card.refuse[("a", 1)] = None  # evict() returns None
    card.refuse[("b", 2)] = RuntimeError("worker is mid-node")  # evict() raises
    arbiter = Arbiter()
    out = arbiter.free_room(4 * MIB, cands, card.true_free, card.evict)
    refused = [s["refused"] for s in out["steps"]]
    assert refused[0] == "evict() returned None"
    assert refused[1] == "evict() raised RuntimeError: worker is mid-node"
    assert refused[2] is None
    assert out["satisfied"]
    stats = arbiter.stats()
    assert (stats["decisions"], stats["steps"], stats["refusals"]) == (1, 3, 2)
    assert stats["bytes_freed"] == 4 * MIB


def test_callback_errors_reach_the_caller_and_free_the_turn() -> None:
    cands = [cand("a", 1, 4 * MIB)]
    arbiter = Arbiter()

    def broken_truth() -> int:
        raise OSError("NVML: driver not loaded")

    with pytest.raises(OSError, match="driver not loaded"):
        arbiter.free_room(MIB, cands, broken_truth, Card(0, cands).evict)

    card = Card(0, cands)
    card.refuse[("a", 1)] = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        arbiter.free_room(MIB, cands, card.true_free, card.evict)

    with pytest.raises(TypeError, match="free bytes"):
        arbiter.free_room(MIB, cands, lambda: "lots", card.evict)
    with pytest.raises(TypeError, match="bytes freed"):
        arbiter.free_room(MIB, cands, lambda: 0, lambda c, want: -1)

    assert arbiter.stats()["errors"] == 4
    assert arbiter.stats()["in_flight"] is False
    card = Card(0, cands)
    assert arbiter.free_room(MIB, cands, card.true_free, card.evict)["satisfied"]


def test_bad_candidates_are_named() -> None:
    arbiter = Arbiter()
    with pytest.raises(ValueError, match="candidate 1: 'resident' is missing"):
        arbiter.plan(1, 0, [cand("a", 1, 1), {"owner": "b", "generation": 1, "model": 2}])
    with pytest.raises(ValueError, match="'resident' must be an int >= 0"):
        arbiter.plan(1, 0, [cand("a", 1, -5)])
    with pytest.raises(TypeError, match="candidate 0 is not a dict"):
        arbiter.plan(1, 0, [("a", 1)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="same"):
        arbiter.free_room(1, [cand("a", 1, 1), cand("a", 1, 2)], lambda: 0, lambda c, w: 0)


def test_holds_count_against_later_decisions() -> None:
    cands = [cand("a", 1, 5 * MIB, 1.0), cand("b", 2, 5 * MIB, 2.0)]
    card = Card(6 * MIB, cands)
    arbiter = Arbiter()
    first = arbiter.free_room(5 * MIB, cands, card.true_free, card.evict, hold=True)
    assert first["steps"] == [] and isinstance(first["hold"], int)
    second = arbiter.free_room(5 * MIB, cands, card.true_free, card.evict, hold=True)
    assert second["held"] == 5 * MIB and len(second["steps"]) == 1
    assert arbiter.stats()["held_bytes"] == 10 * MIB
    assert arbiter.release(first["hold"]) == 5 * MIB
    assert arbiter.release(first["hold"]) is None
    assert arbiter.release(second["hold"]) == 5 * MIB
    assert arbiter.stats()["holds"] == 0


def test_an_eviction_that_calls_back_in_is_refused() -> None:
    cands = [cand("a", 1, 4 * MIB)]
    card = Card(0, cands)
    arbiter = Arbiter()
    nested: list[BaseException] = []

    def evict(c: dict, want: int) -> int | None:
        try:
            arbiter.free_room(1, [], card.true_free, card.evict)
        except ArbiterError as e:
            nested.append(e)
        return card.evict(c, want)

    out = arbiter.free_room(MIB, cands, card.true_free, evict)
    assert out["satisfied"]
    assert len(nested) == 1 and isinstance(nested[0], AirlockError)
    assert "wait on itself" in str(nested[0])
    assert arbiter.stats()["reentries"] == 1


def test_two_threads_contend_and_the_waiter_rereads() -> None:
    """Thread A holds the turn inside a Python eviction; thread B asks meanwhile and waits with
    the GIL released (else A's callback could never finish); when A is done, B re-reads free
    memory, finds enough, and evicts nothing."""
    cands = [cand("a", 1, 8 * MIB, 1.0), cand("b", 2, 8 * MIB, 2.0)]
    card = Card(2 * MIB, cands)
    arbiter = Arbiter()
    inside = threading.Event()
    go_on = threading.Event()
    results: dict[str, dict] = {}

    def slow_evict(c: dict, want: int) -> int | None:
        inside.set()
        go_on.wait(30)
        return card.evict(c, want)

    def first() -> None:
        results["a"] = arbiter.free_room(6 * MIB, cands, card.true_free, slow_evict)

    def second() -> None:
        results["b"] = arbiter.free_room(6 * MIB, cands, card.true_free, card.evict)

    ta = threading.Thread(target=first)
    ta.start()
    inside.wait(30)
    tb = threading.Thread(target=second)
    tb.start()
    wait_until(lambda: arbiter.stats()["waiting"] == 1, "the second request to wait")
    assert arbiter.stats()["in_flight"]
    # The waiter released the GIL: this thread (and A's callback) still run Python.
    go_on.set()
    ta.join(30)
    tb.join(30)
    assert not ta.is_alive() and not tb.is_alive(), "deadlock"
    assert len(results["a"]["steps"]) == 1
    assert results["b"]["steps"] == [] and results["b"]["satisfied"]
    stats = arbiter.stats()
    assert (stats["decisions"], stats["waits"], stats["in_flight"]) == (2, 1, False)


def test_many_threads_one_decision_at_a_time() -> None:
    """Eight threads with evictions that yield the GIL: the card's calls of one decision are
    never interleaved with another's, and every byte freed is counted once."""
    cands = [cand(f"p{i % 4}", i, MIB, float(i)) for i in range(32)]
    card = Card(0, cands)
    lock = threading.Lock()
    log: list[tuple[int, int]] = []
    arbiter = Arbiter()

    def worker(n: int) -> None:
        for r in range(4):
            decision = (n, r)

            def true_free(decision: tuple[int, int] = decision) -> int:
                with lock:
                    log.append(decision)
                    return card.free

            def evict(c: dict, want: int, decision: tuple[int, int] = decision) -> int | None:
                time.sleep(0)  # let the other threads run (and try to get in)
                with lock:
                    log.append(decision)
                    return card.evict(c, want)

            arbiter.free_room(card.free + MIB, cands, true_free, evict)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "deadlock"
    # Each decision's calls form one block: once another decision's calls start, its own
    # never resume.
    finished: set[tuple[int, int]] = set()
    for prev, cur in itertools.pairwise(log):
        if prev != cur:
            finished.add(prev)
            assert cur not in finished, f"decision {cur} interleaved with another"
    stats = arbiter.stats()
    assert stats["decisions"] == 32
    assert len(set(log)) == 32
    assert stats["bytes_freed"] == sum(c["resident"] for c in cands) - sum(card.resident.values())
    assert stats["waits"] > 0

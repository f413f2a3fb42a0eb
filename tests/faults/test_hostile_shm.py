"""A hostile worker's shared memory: what it can make the host commit and hold.

- a sealed but sparse 512 MiB segment with a 16-byte tensor in it: the host maps the segment
  lazily and populates only what the descriptor references, so its ``RssShmem`` barely moves
  (with the whole segment mapped ``MAP_POPULATE`` it grew by the whole 512 MiB);
- segments beyond ``AIRLOCK_MAX_PEER_MAP_MIB`` bytes, or beyond ``AIRLOCK_MAX_PEER_SEGMENTS``
  (default 256, each a host fd): refused at the announcement with an error naming the worker
  and the setting, counted once, the worker ended, nothing of it left in the host;
- an honest pool keeps within the same settings on its own side: a transfer that would break
  them fails there with an error, and nobody is killed.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import comfy_airlock
from comfy_airlock import _native

from .chaos import iterations


@pytest.fixture(autouse=True)
def _replies_through_the_socket(monkeypatch):
    """These workers write raw frames on the call lane's socket ahead of their reply, as a
    hostile worker would. A reply that goes by mail (ADR 0061) may be taken before bytes the
    lane never counted, so the refusal would come one call later: the mailboxes are off here,
    and the socket's framing is what these tests check (the mailbox's own refusals are tested
    in `airlock-supervisor`)."""
    monkeypatch.setenv("AIRLOCK_LANE_MAIL", "off")


MIB = 1 << 20


def rss_shmem() -> int:
    """This process's resident shared memory, in bytes (``RssShmem`` of /proc/self/status)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssShmem:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssShmem in /proc/self/status")


def wait_dead(w, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while w.alive:
        assert time.monotonic() < deadline, "the killed worker is still alive"
        time.sleep(0.01)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_sparse_segment_costs_the_host_only_what_is_read(spawn, fault, leaks):
    run = fault("hostile worker: 16 B tensor in a sparse 512 MiB segment")
    w = spawn()
    w.call("fault_targets:echo", 0)
    leaks.baseline_threads()
    for i in range(iterations(3)):
        with run.iteration(i):
            segments = w.lane.stats()["peer_segments"]
            before = rss_shmem()
            view = w.call("fault_targets:sparse_tensor", 512 * MIB, 1000 + i)
            assert view.nbytes == 16 and int(view.sum()) == 0  # read: its page is populated
            grown = rss_shmem() - before
            # One 2 MiB chunk is populated around what is read; 16 MiB leaves room for
            # whatever else the interpreter maps meanwhile, and is 32 times less than the
            # segment the whole of which used to be populated.
            assert grown < 16 * MIB, f"RssShmem grew {grown} bytes for a 16-byte tensor"
            assert w.lane.stats()["peer_segments"] == segments + 1, "the forged one is held"
            run.outcome(f"RssShmem +{grown // 1024} KiB")
            del view
            w.kill()  # it lied about the region: not trusted with another call
            wait_dead(w)
            assert w.call("fault_targets:echo", i) == i
            run.check_leaks(i, leaks.check([w]))
    run.finish()


@pytest.mark.parametrize(
    "setting, value, count, nbytes, words",
    [
        ("AIRLOCK_MAX_PEER_MAP_MIB", "256", 1, 512 * MIB, "more than the 268435456 it may"),
        ("AIRLOCK_MAX_PEER_SEGMENTS", None, 3000, 4096, "more than the 256 it may hold"),
    ],
    ids=["bytes", "segments"],
)
def test_what_a_worker_announces_beyond_its_limits_is_refused(
    spawn, fault, leaks, monkeypatch, setting, value, count, nbytes, words
):
    run = fault(f"hostile worker: announcements past {setting}")
    if value is not None:
        monkeypatch.setenv(setting, value)  # read at the spawn, by the host and the worker
    else:
        monkeypatch.delenv(setting, raising=False)  # the default
    w = spawn()
    w.call("fault_targets:echo", 0)
    leaks.baseline_threads()
    fds, shmem = open_fds(), rss_shmem()
    for i in range(iterations(3)):
        with run.iteration(i):
            before = _native.rejections()
            pid = w.pid
            with pytest.raises(comfy_airlock.ProtocolError) as info:
                w.call("fault_targets:announce_segments", count, nbytes)
            msg = str(info.value)
            assert f"worker '{w.name}'" in msg, msg
            assert setting in msg and words in msg, msg
            after = _native.rejections()
            assert after["protocol"] == before["protocol"] + 1, (before, after)
            assert {k: v for k, v in after.items() if k != "protocol"} == {
                k: v for k, v in before.items() if k != "protocol"
            }
            assert not w.alive, "a worker that broke its limits is ended"
            assert w.call("fault_targets:pid") != pid
            run.outcome("refused (protocol), worker ended")
            run.check_leaks(i, leaks.check([w]))
            assert open_fds() <= fds + 4, "the refused worker's fds are closed"
            assert rss_shmem() - shmem < 16 * MIB
    run.finish()


def test_an_honest_pool_keeps_within_what_its_peer_accepts(spawn, fault, leaks, monkeypatch):
    run = fault("pool within the peer's limits (segments, mapped bytes)")
    monkeypatch.setenv("AIRLOCK_MAX_PEER_SEGMENTS", "2")
    monkeypatch.setenv("AIRLOCK_MAX_PEER_MAP_MIB", "160")
    w = spawn()
    pid = w.call("fault_targets:pid")
    block = np.ones(40 * MIB, dtype=np.uint8)  # a segment of its own each (over 32 MiB)
    leaks.baseline_threads()
    for i in range(iterations(3)):
        with run.iteration(i):
            # Three segments are more than the worker accepts: the host's pool refuses the
            # third before anything is sent.
            with pytest.raises(comfy_airlock.AirlockError, match="AIRLOCK_MAX_PEER_SEGMENTS"):
                w.call("fault_targets:checksum", [block, block, block])
            assert w.lane.stats()["leased_regions"] == 0
            assert w.call("fault_targets:checksum", block) == len(range(0, 40 * MIB, 4096))
            # The worker's pool is held to the host's 160 MiB: a result over it fails there.
            with pytest.raises(comfy_airlock.AirlockError, match="AIRLOCK_MAX_PEER_MAP_MIB"):
                w.call("fault_targets:make", 200 * MIB, 1)
            assert w.call("fault_targets:pid") == pid, "nobody was killed"
            run.outcome("refused on the sender's side, worker kept")
            run.check_leaks(i, leaks.check([w]))
    run.finish()

"""Kept copies (comfy_airlock/kept.py, ADRs 0027 and 0034): a tensor the host sends again
unchanged goes as a reference to the copy it kept from its second send, and never with stale
bytes, whatever route wrote it: torch in place, a numpy view, a raw pointer, another tensor on
the same storage, the worker writing into its own view. A tensor sent once is not kept."""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest
import torch

from comfy_airlock import _native, kept, settings

pytestmark = pytest.mark.skipif(
    not _native.write_watch_supported(),
    reason="this kernel has no userfaultfd async write-protection or PAGEMAP_SCAN (Linux 6.7): "
    "tensors are copied on every send, which test_values covers",
)

N = 1 << 20  # float32 elements: 4 MiB, above kept.MIN_BYTES


def _counts(w):
    s = kept.stats(w.lane)
    return s["reused"], s["copied"]


def _sees(w, x, i):
    """What the worker reads at flat index ``i`` of ``x`` sent now."""
    return w.call("airlock_testpack:at", x, i)


def _kept(w, x, i=0):
    """Sends ``x`` twice: remembered the first time, kept the second."""
    _sees(w, x, i)
    return _sees(w, x, i)


def test_an_unchanged_tensor_goes_again_without_a_copy(host_worker):
    w = host_worker
    x = torch.rand(N)
    reused, copied = _counts(w)
    assert _sees(w, x, 5) == x[5].item()
    assert _counts(w) == (reused, copied), "a first send is copied, not kept"
    assert _sees(w, x, 5) == x[5].item()
    assert _counts(w) == (reused, copied + 1), "kept from its second send"
    for _ in range(3):
        assert _sees(w, x, 5) == x[5].item()
    assert _counts(w) == (reused + 3, copied + 1), "sent again by reference"
    view = x[: N // 2]  # another tensor on the same memory, unchanged: the watch decides
    assert _sees(w, view, 7) == x[7].item()


def _write_routes(x):
    """Writes to element 9 of ``x`` by each route that bypasses x's version counter (and one
    that does not), each returning the value written."""
    storage_alias = torch.empty(0).set_(x.untyped_storage())

    def numpy_view():
        x.numpy()[9] = 1.5
        return 1.5

    def raw_pointer():
        ctypes.c_float.from_address(x.data_ptr() + 9 * 4).value = 2.5
        return 2.5

    def data_alias():
        x.data[9] = 3.5
        return 3.5

    def storage_sharer():
        storage_alias[9] = 4.5
        return 4.5

    def torch_in_place():
        x[9] = 5.5
        return 5.5

    return [numpy_view, raw_pointer, data_alias, storage_sharer, torch_in_place]


def test_no_write_by_any_route_is_missed(host_worker):
    w = host_worker
    x = torch.zeros(N)
    _sees(w, x, 9)  # remembered: from here on each send is kept or goes by reference
    for write in _write_routes(x):
        version = x._version
        _sees(w, x, 9)  # kept, or sent by reference
        reused, copied = _counts(w)
        value = write()
        assert _sees(w, x, 9) == value, f"{write.__name__}: the worker saw stale bytes"
        assert _counts(w) == (reused, copied + 1), f"{write.__name__}: not copied again"
        if write.__name__ != "torch_in_place":
            assert x._version == version, f"{write.__name__} bypasses the version counter"


def test_inference_tensors_are_kept_and_their_writes_seen(host_worker):
    # ComfyUI runs nodes under inference_mode: such tensors have no version counter.
    w = host_worker
    with torch.inference_mode():
        x = torch.zeros(N)
        assert x.is_inference()
        _kept(w, x, 4)
        reused, copied = _counts(w)
        assert _sees(w, x, 4) == 0
        assert _counts(w) == (reused + 1, copied)
        x[4] = 6.5  # in place, no counter to tell
        assert _sees(w, x, 4) == 6.5
        assert _counts(w)[1] == copied + 1


def test_a_write_from_another_thread_is_seen(host_worker):
    import threading

    w = host_worker
    x = torch.zeros(N)
    _kept(w, x, 100)
    t = threading.Thread(target=lambda: ctypes.memset(x.data_ptr() + 400, 7, 4))
    t.start()
    t.join()
    assert _sees(w, x, 100) == x[100].item() != 0


def test_numpy_arrays_are_kept_too(host_worker):
    w = host_worker
    a = np.zeros(N, dtype=np.float32)
    _kept(w, a, 3)
    reused, copied = _counts(w)
    assert _sees(w, a, 3) == 0
    assert _counts(w) == (reused + 1, copied)
    a[3] = 8.0
    assert _sees(w, a, 3) == 8.0


def test_the_workers_writes_to_its_view_never_reach_the_kept_copy(host_worker):
    w = host_worker
    x = torch.full((N,), 2.0)
    _kept(w, x)
    for through_numpy in (False, True):
        # The node writes into its input in place: it sees its write...
        assert w.call("airlock_testpack:scribble", x, 99.0, through_numpy) == 99.0
        # ...but the next node gets the host's bytes, by reference.
        reused, _ = _counts(w)
        assert _sees(w, x, 0) == 2.0
        assert _counts(w)[0] == reused + 1


def test_the_workers_view_of_a_kept_copy_is_asked_the_fast_way(host_worker):
    # ADR 0039: its private mapping is write-protected, so the pages a node wrote are found
    # by the written-only scan (where this kernel can arm one at all), written or not.
    w = host_worker
    x = torch.full((N,), 5.0)
    _kept(w, x)
    watched, clean, can = w.call("airlock_testpack:view_watched", x)
    assert (watched, clean) == (can, True)
    assert w.call("airlock_testpack:scribble", x, 7.0, False) == 7.0
    # The next view drops the node's copy of that page and arms it again.
    assert w.call("airlock_testpack:view_watched", x) == (can, True, can)
    assert _sees(w, x, 0) == 5.0


def test_a_view_the_worker_keeps_and_writes_does_not_show_in_a_new_one(host_worker):
    w = host_worker
    x = torch.full((N,), 3.0)
    _kept(w, x)
    i = w.call("airlock_testpack:keep_scribbled", x, 42.0) - 1
    assert _sees(w, x, 0) == 3.0, "the new view shows the host's bytes"
    assert w.call("airlock_testpack:kept_at", i, 0) == 42.0, "the kept view keeps its write"
    assert w.call("airlock_testpack:drop_kept") is True


def test_a_returned_kept_region_is_the_hosts_own_private_view(host_worker):
    w = host_worker
    x = torch.full((N,), 4.0)
    _kept(w, x)
    y = w.call("airlock_testpack:echo", x)  # a reference back to our kept copy
    assert torch.equal(x, y)
    y[0] = -1.0  # the host writes into what came back...
    assert x[0].item() == 4.0
    assert _sees(w, x, 0) == 4.0, "...which is not the kept copy"
    assert _sees(w, y, 0) == -1.0, "and what it wrote goes when y is sent"


def test_the_copy_goes_with_its_tensor(make_worker):
    w = make_worker()
    x = torch.rand(N)
    _kept(w, x)
    assert kept.stats(w.lane)["bytes"] == 4 * N
    del x
    gc.collect()
    w.call("airlock_testpack:echo", 0)  # the lane's next use gives the region back
    assert kept.stats(w.lane)["bytes"] == 0
    assert w.lane.stats()["leased_regions"] == 0


def test_the_budget_keeps_the_most_recent(make_worker, monkeypatch):
    monkeypatch.setattr(settings.get(), "keep_sent", 6 << 20)
    w = make_worker()
    a, b = torch.rand(N), torch.rand(N)  # 4 MiB each, 6 MiB allowed
    _kept(w, a)
    _kept(w, b)
    s = kept.stats(w.lane)
    assert (s["copies"], s["bytes"]) == (1, 4 * N)
    _, copied = _counts(w)
    _sees(w, a, 0)
    assert _counts(w)[1] == copied, "a was evicted for b: sent as a plain copy..."
    _sees(w, a, 0)
    assert _counts(w)[1] == copied + 1, "...and kept again from its next send"


def test_shared_memory_is_never_kept(host_worker):
    w = host_worker
    x = torch.rand(N).share_memory_()  # another process could write it
    before = kept.stats(w.lane)["copied"]
    assert _kept(w, x, 1) == x[1].item()
    assert kept.stats(w.lane)["copied"] == before


def test_a_tensor_sent_once_is_not_kept_nor_another_object_on_its_memory(make_worker):
    w = make_worker()
    x = torch.rand(N)
    _sees(w, x, 0)
    assert kept.stats(w.lane)["bytes"] == 0, "a first send keeps nothing"
    same_memory = x.view(N)  # another object on the same bytes: not "sent before"
    _sees(w, same_memory, 0)
    assert kept.stats(w.lane)["copied"] == 0
    for _ in range(2):
        assert _sees(w, x, 3) == x[3].item()
    assert kept.stats(w.lane)["copied"] == 1

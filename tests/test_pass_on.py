"""Tensors passed on without a copy: a worker's output sent back to it, a worker returning its
input, and again and again, cross as references to the region they already live in."""

from __future__ import annotations

import gc

import numpy as np
import torch
from conftest import memfd_count


def test_a_returned_tensor_goes_back_and_forth_without_a_copy(host_worker):
    w = host_worker
    x = torch.arange(1 << 20, dtype=torch.float32)
    y = w.call("airlock_testpack:echo", x)  # x is copied once, into our pool
    assert torch.equal(x, y)
    before = w.lane.stats()
    addr = y.data_ptr()
    for _ in range(20):
        y = w.call("airlock_testpack:echo", y)
        assert y.data_ptr() == addr, "the same bytes came back: nothing was copied"
    assert torch.equal(x, y)
    after = w.lane.stats()
    assert after["segments"] == before["segments"]
    assert after["segment_bytes"] == before["segment_bytes"]


def test_the_worker_keeps_using_what_it_passed_on(host_worker):
    w = host_worker
    x = torch.ones(4096)
    kept = w.call("airlock_testpack:keep", x)  # the worker keeps its view of our region
    y = w.call("airlock_testpack:echo", x)
    assert torch.equal(y, x)
    assert w.call("airlock_testpack:drop_kept") is True
    assert kept >= 1


def test_numpy_arrays_pass_on_too(host_worker):
    w = host_worker
    a = np.arange(100_000, dtype=np.float64)
    b = w.call("airlock_testpack:echo", a)
    addr = b.ctypes.data
    c = w.call("airlock_testpack:echo", b)
    assert c.ctypes.data == addr
    assert np.array_equal(a, c)


def test_no_lease_outlives_the_views(make_worker):
    baseline = memfd_count()
    w = make_worker()
    y = w.call("airlock_testpack:echo", torch.randn(256, 256))
    for _ in range(5):
        y = w.call("airlock_testpack:echo", y)
    z = y.clone()
    del y
    gc.collect()
    w.call("airlock_testpack:echo", 0)  # carries our releases, brings the worker's
    w.call("airlock_testpack:echo", 0)
    assert w.lane.stats()["leased_regions"] == 0, w.lane.stats()
    assert z.shape == (256, 256)
    w.close()
    assert memfd_count() == baseline

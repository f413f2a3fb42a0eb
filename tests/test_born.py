"""Outputs born in shared memory (ADR 0044): a worker's node writes its large CPU outputs
straight into the call lane's pool (``libairlock_born.so``, preloaded), and the reply sends the
region instead of copying it. Real workers, real torch operators, the real preload library
the wheel builds; nothing is simulated."""

from __future__ import annotations

import gc

import torch

from comfy_airlock import born_policy, settings
from comfy_airlock.worker_env import worker_env

N = 1 << 18  # 1 MiB of float32: a small IMAGE's worth, at the threshold's scale


def _stats(w):
    return w.call("airlock_born:stats")


def _env(**ours: str) -> dict[str, str]:
    return worker_env({}, {settings.ENV[k]: v for k, v in ours.items()})


def test_the_wheel_carries_the_library():
    # make build puts it beside the extension (scripts/wheel.sh); without it every test below
    # would pass through the copy path and prove nothing.
    assert born_policy.LIBRARY.is_file(), born_policy.LIBRARY


def test_a_fresh_output_is_sent_as_the_region_its_kernel_wrote(make_worker):
    w = make_worker()
    x = torch.rand(N)
    before = _stats(w)["born"]
    assert before is not None, "the worker started without its births"
    y = w.call("airlock_born:scale", x, 3.0)
    assert torch.equal(y, x * 3.0)
    after = _stats(w)["born"]
    assert after["sent"] == before["sent"] + 1, (before, after)
    assert after["births"] >= before["births"] + 1
    # Strided but dense (a transposed image): the same, with its strides.
    xt = x.view(512, 512).t()
    yt = w.call("airlock_born:scale", xt, 2.0)
    assert yt.stride() == xt.stride()
    assert torch.equal(yt, xt * 2.0)
    assert _stats(w)["born"]["sent"] == after["sent"] + 1
    # Back into the worker (its own region as the next node's input), and out again.
    z = w.call("airlock_born:scale", y, 1 / 3.0)
    assert torch.allclose(z, x)


def test_every_hold_is_released_when_both_sides_drop_the_output(make_worker):
    w = make_worker()
    x = torch.rand(N)
    outs = [w.call("airlock_born:scale", x, float(i)) for i in range(5)]
    for i, y in enumerate(outs):
        assert torch.equal(y, x * float(i))
    assert _stats(w)["born"]["sent"] >= 5
    del outs, y
    gc.collect()
    w.call("airlock_testpack:echo", 0)  # carries our releases
    s = _stats(w)
    assert s["born"]["live_blocks"] == 0, s
    assert s["born"]["live_bytes"] == 0, s
    assert s["pool"]["leased_regions"] == 0, s
    assert w.lane.stats()["peer_segments"] >= 1


def test_an_output_the_node_keeps_is_sent_again_without_a_copy(make_worker):
    w = make_worker()
    a = w.call("airlock_born:made_and_kept", N, 4)
    b = w.call("airlock_born:kept")
    assert torch.equal(a, torch.full((N,), 4.0))
    assert torch.equal(b, a)
    s = _stats(w)["born"]
    assert s["sent"] == 2 and s["live_blocks"] == 1, s
    assert w.call("airlock_born:drop_kept")
    del a, b
    gc.collect()
    w.call("airlock_testpack:echo", 0)
    s = _stats(w)
    assert s["born"]["live_blocks"] == 0 and s["pool"]["leased_regions"] == 0, s


def test_births_past_the_budget_come_from_the_heap_and_are_copied(make_worker):
    w = make_worker(env=_env(born_budget="1"))  # 1 MiB: a 4 MiB output does not fit
    y = w.call("airlock_born:made", 4 * N, 2)
    assert torch.equal(y, torch.full((4 * N,), 2.0))
    s = _stats(w)["born"]
    assert s["sent"] == 0 and s["refused"] >= 1, s
    small = w.call("airlock_born:made", N // 2, 1)  # 512 KiB fits
    assert torch.equal(small, torch.full((N // 2,), 1.0))
    assert _stats(w)["born"]["sent"] == 1


def test_off_means_no_library_in_the_worker(make_worker):
    w = make_worker(env=_env(born_budget="0"))
    assert _stats(w)["born"] is None
    seen = w.call("airlock_born:environment")
    assert seen == {"ld_preload": None, "mapped_here": False, "mapped_in_child": False}
    x = torch.rand(N)
    assert torch.equal(w.call("airlock_born:scale", x, 2.0), x * 2.0)


def test_the_pack_and_what_it_starts_get_their_own_ld_preload_back(make_worker):
    w = make_worker()
    seen = w.call("airlock_born:environment")
    assert seen == {"ld_preload": None, "mapped_here": True, "mapped_in_child": False}
    # A pack's own LD_PRELOAD ([env_vars]) comes after ours and is what the pack sees.
    w2 = make_worker(key="host", env={**_env(), "LD_PRELOAD": "libm.so.6"})
    seen = w2.call("airlock_born:environment")
    assert seen == {"ld_preload": "libm.so.6", "mapped_here": True, "mapped_in_child": False}
    assert _stats(w2)["born"] is not None


def test_a_forked_child_leaves_the_parents_born_blocks_alone(make_worker):
    w = make_worker()
    code, out = w.call("airlock_born:fork_with_born", N)
    assert code == 0
    assert torch.equal(out, torch.full((N,), 7.0))
    x = torch.rand(N)
    assert torch.equal(w.call("airlock_born:scale", x, 2.0), x * 2.0)


def test_another_thread_of_the_pack_allocates_from_the_heap_meanwhile(make_worker):
    w = make_worker()
    before = _stats(w)["born"]
    rounds = 40
    mine, other = w.call("airlock_born:two_threads", N, rounds)
    assert mine == [float(i) * 2 * N for i in range(rounds)]
    assert other == [float(i) * N for i in range(rounds)]
    after = _stats(w)["born"]
    # Only the node's thread is armed: its 2 blocks a round at most (full, then the product).
    assert after["births"] - before["births"] <= 2 * rounds + 2, (before, after)
    assert after["live_blocks"] == 0, after


def test_an_output_made_with_numpy_is_born_too(make_worker):
    # ADR 0045: numpy's data allocator (NEP 49) lets a large array on the call's thread be
    # born, so the image most packs make with numpy and torch.from_numpy crosses as a region.
    w = make_worker()
    before = _stats(w)["born"]
    y = w.call("airlock_born:numpy_image", 512, 51)
    assert y.shape == (1, 512, 512, 3) and y.dtype == torch.float32
    assert torch.equal(y, torch.full((1, 512, 512, 3), 51 / 255.0))
    after = _stats(w)["born"]
    assert after["sent"] == before["sent"] + 1, (before, after)
    # A numpy array returned as it is: the same.
    a = w.call("airlock_born_numpy:numpy_array", N, 2.5)
    assert a.shape == (N,) and (a == 2.5).all()
    assert _stats(w)["born"]["sent"] == after["sent"] + 1
    del y, a
    gc.collect()
    w.call("airlock_testpack:echo", 0)  # carries our releases
    s = _stats(w)
    assert s["born"]["live_blocks"] == 0 and s["pool"]["leased_regions"] == 0, s


def test_numpy_keeps_its_own_allocator_off_the_call_thread_and_for_small_arrays(make_worker):
    w = make_worker()
    seen = w.call("airlock_born_numpy:numpy_allocator")
    assert seen["handler"] == "airlock_born", seen
    assert seen["array"] == "airlock_born", seen
    # numpy's context variable: a thread of the pack's own starts with numpy's default.
    assert seen["other_thread"] == {
        "handler": "default_allocator",
        "array": "default_allocator",
    }, seen
    # Zeroed, grown, shrunk and freed on the call thread: bytes right, nothing left held.
    assert w.call("airlock_born_numpy:numpy_in_place", N) == {
        "zeroed": True,
        "grown": True,
        "shrunk": True,
    }
    s = _stats(w)
    assert s["born"]["live_blocks"] == 0, s


def test_with_births_off_numpy_keeps_its_default_allocator(make_worker):
    w = make_worker(env=_env(born_budget="0"))
    assert w.call("airlock_born_numpy:numpy_allocator")["handler"] == "default_allocator"


def test_numpy_1_arrays_are_born_too(make_worker):
    # The numpy 1.x worker (no torch): numpy's C API table under numpy.core, the same places.
    w = make_worker("py310")
    assert w.call("airlock_born_numpy:numpy_allocator")["handler"] == "airlock_born"
    before = w.call("airlock_born_numpy:born")
    a = w.call("airlock_born_numpy:numpy_array", N, 1.5)
    assert a.shape == (N,) and (a == 1.5).all()
    assert w.call("airlock_born_numpy:born")["sent"] == before["sent"] + 1

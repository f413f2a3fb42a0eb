"""Pickle only for the types a pack lists (``pickle = [...]`` in its airlock.toml), enforced by
the sender and the receiver; crafted pickles naming anything else are refused before anything
is imported or called."""

from __future__ import annotations

import pickle
import sys

import airlock_pickle_types as T
import pytest

import comfy_airlock
from comfy_airlock import env, pickling, values

POINT = "airlock_pickle_types.Point"


@pytest.mark.parametrize("key", ["host", "py310"])
def test_listed_type_round_trips_both_ways(make_worker, key):
    w = make_worker(key, pickle=[POINT])
    p = w.call("airlock_pickle_types:make_point", 1, 2.5)
    assert type(p) is T.Point and p == T.Point(1, 2.5)
    assert w.call("airlock_pickle_types:point_sum", T.Point(3, 4)) == 7
    nested = {"a": [T.Point(1, (2, "x")), T.Point(b"\x00", None)]}
    assert w.call("airlock_pickle_types:echo", nested) == nested


def test_unlisted_types_are_refused_by_the_sender(make_worker):
    w = make_worker(pickle=[POINT])
    with pytest.raises(TypeError, match=r"Secret .*does not list it in `pickle`"):
        w.call("airlock_pickle_types:echo", T.Secret())
    # A listed type that holds an unlisted one (or a function) fails on the sending side.
    with pytest.raises(pickling.PickleRefused, match=r"holds a airlock_pickle_types\.Secret"):
        w.call("airlock_pickle_types:echo", T.Point(T.Secret(), 1))
    with pytest.raises(pickling.PickleRefused, match=r"holds a builtins\.eval"):
        w.call("airlock_pickle_types:echo", T.Point(eval, 1))
    # The worker refuses the same way for what it sends.
    with pytest.raises(TypeError, match=r"Secret .*does not list it in `pickle`"):
        w.call("airlock_pickle_types:make_secret")
    with pytest.raises(comfy_airlock.RemoteError, match=r"PickleRefused.*Secret") as e:
        w.call("airlock_pickle_types:point_holding_secret")
    assert e.value.remote_type == "comfy_airlock.pickling.PickleRefused"
    # Nothing is pickled for a pack that lists nothing.
    plain = make_worker(name="no-pickle")
    with pytest.raises(TypeError, match="does not list it in `pickle`"):
        plain.call("airlock_pickle_types:make_point", 1, 2)
    # The worker still works after every refusal.
    assert w.call("airlock_pickle_types:point_sum", T.Point(1, 1)) == 2


CRAFTED = [
    # (declared type, bytes, what the refusal names)
    (POINT, lambda m: T.evil_pickle(m), "system"),
    ("os.system", lambda m: T.evil_pickle(m), "os.system"),
    (POINT, lambda m: pickle.dumps(T.Secret()), "airlock_pickle_types.Secret"),
    (POINT, lambda m: pickle.dumps(T.Point(eval, f"open({m!r}, 'w')")), "builtins.eval"),
    (POINT, lambda m: pickle.dumps(T.Point(1, 2), protocol=0), "copy_reg._reconstructor"),
    (POINT, lambda m: pickle.dumps(3 + 4j), "held a builtins.complex"),
]


@pytest.mark.parametrize("declared,make,named", CRAFTED)
def test_crafted_pickles_are_refused_by_the_host(make_worker, tmp_path, declared, make, named):
    marker = tmp_path / "owned"
    w = make_worker(pickle=[POINT])
    with pytest.raises(pickling.PickleRefused, match=named.replace(".", r"\.")):
        w.call("airlock_pickle_types:send_forged", declared, make(str(marker)))
    assert not marker.exists()
    assert w.call("airlock_pickle_types:point_sum", T.Point(2, 3)) == 5


@pytest.mark.parametrize("declared,make,named", CRAFTED[:4])
def test_crafted_pickles_are_refused_by_the_worker(make_worker, tmp_path, declared, make, named):
    marker = tmp_path / "owned"
    w = make_worker(pickle=[POINT])
    T.forge()  # this test's host plays the compromised peer
    try:
        with pytest.raises(comfy_airlock.RemoteError, match=r"PickleRefused"):
            w.call("airlock_pickle_types:receive", T.Forged(declared, make(str(marker))))
    finally:
        T.unforge()
    assert not marker.exists()
    assert w.call("airlock_pickle_types:point_sum", T.Point(2, 3)) == 5


def test_a_receiver_without_a_list_refuses_any_pickle(make_worker):
    w = make_worker(name="no-pickle")
    with pytest.raises(pickling.PickleRefused, match="no `pickle` types are allowed here"):
        w.call("airlock_pickle_types:send_forged", POINT, pickle.dumps(T.Point(1, 2)))


def test_the_host_never_imports_a_module_a_worker_names(make_worker):
    name = "airlock_pickle_unimported"
    assert name not in sys.modules
    w = make_worker(pickle=[f"{name}.Thing"])
    with pytest.raises(pickling.PickleRefused, match="not imported in this process"):
        w.call(f"{name}:make", 3)
    assert name not in sys.modules


def test_lists_are_checked_where_they_are_made(make_worker, tmp_path):
    with pytest.raises(ValueError, match="run code or touch files"):
        make_worker(pickle=["os.system"])
    with pytest.raises(ValueError, match=r"not a module\.QualName"):
        make_worker(pickle=["Point"])
    with pytest.raises(ValueError, match="reserved"):
        values.register_codec(pickling.CODEC, T.Secret, lambda s: s.value, T.Secret)
    # The config parser refuses at least every module the runtime refuses.
    for module in sorted(pickling.DENIED_MODULES):
        (tmp_path / "airlock.toml").write_text(f'pickle = ["{module}.X"]\n')
        with pytest.raises(env.ConfigError, match="run code or touch files"):
            env.pack_config(tmp_path)
    (tmp_path / "airlock.toml").write_text(f'pickle = ["{POINT}"]\n')
    assert env.pack_config(tmp_path)["pickle"] == [POINT]

"""Values cross bit-exact: primitives, containers, tensors of every dtype and layout, arrays."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest
import torch

import comfy_airlock
from comfy_airlock import kept


def bits(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def same(a: torch.Tensor, b: torch.Tensor) -> None:
    assert isinstance(b, torch.Tensor)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert bits(a) == bits(b)


PRIMITIVES = [
    None,
    True,
    False,
    0,
    -1,
    2**63 - 1,
    -(2**63),
    2**100,
    -(2**70) + 3,
    0.0,
    -0.0,
    1.5e-300,
    math.inf,
    -math.inf,
    "",
    "héllo ✓ \u0000 end",
    b"",
    b"\x00\xffbytes",
    [],
    (),
    {},
    [1, [2, [3, (4, None)]]],
    {"a": 1, 2: "b", (1, 2): [3], None: {"n": True}, 1.5: b"x"},
    ("tuple", ["list", ("tuple",)]),
]


@pytest.mark.parametrize("value", PRIMITIVES, ids=repr)
def test_primitives_round_trip_exactly(host_worker, value):
    back = host_worker.call("airlock_testpack:echo", value)
    assert back == value
    assert type(back) is type(value)
    if isinstance(value, float):
        assert math.copysign(1, back) == math.copysign(1, value)


def test_nan_round_trips(host_worker):
    assert math.isnan(host_worker.call("airlock_testpack:echo", math.nan))


def test_kwargs_and_several_args(host_worker):
    args, kwargs = host_worker.call("airlock_testpack:echo", 1, "two", target="kw", n=None)
    assert args == (1, "two") and kwargs == {"target": "kw", "n": None}


DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.uint16,
    torch.int32,
    torch.uint32,
    torch.int64,
    torch.uint64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
]


def random_tensor(shape, dtype, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(
        0,
        256,
        (int(np.prod(shape)) * torch.empty((), dtype=dtype).element_size(),),
        generator=g,
        dtype=torch.uint8,
    )
    if dtype == torch.bool:
        return (raw % 2).bool().reshape(shape)
    return raw.view(dtype).reshape(shape)  # every bit pattern, NaNs included


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_round_trips_bit_exact(host_worker, dtype):
    t = random_tensor((3, 5, 7), dtype)
    same(t, host_worker.call("airlock_testpack:echo", t))


LAYOUTS = {
    "scalar": lambda: torch.tensor(3.25),
    "contiguous": lambda: torch.randn(4, 8, 16),
    "transposed": lambda: torch.randn(8, 16).t(),
    "channels_last": lambda: torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last),
    "stepped_slice": lambda: torch.randn(10, 12)[::2, 1::3],
    "storage_offset": lambda: torch.randn(100)[37:61].reshape(4, 6),
    "expanded": lambda: torch.randn(1, 5).expand(4, 5),
    "zero_size": lambda: torch.empty(0, 3, 7),
    "zero_size_scalarless": lambda: torch.empty(0),
    "big_image": lambda: torch.rand(1, 512, 512, 3),
    "size_one_dims": lambda: torch.randn(1, 6, 1, 4),
    "size_one_odd_strides": lambda: torch.randn(6, 4).as_strided((1, 6, 1, 4), (99, 4, 7, 1)),
    "requires_grad": lambda: torch.randn(3, 4, requires_grad=True),
}


@pytest.mark.parametrize("name", LAYOUTS)
def test_layouts_round_trip(host_worker, name):
    t = LAYOUTS[name]()
    back = host_worker.call("airlock_testpack:echo", t)
    same(t, back)


def test_lazy_conjugate_and_negative_views_cross_resolved(host_worker):
    z = torch.randn(4, 3, dtype=torch.complex64)
    back = host_worker.call("airlock_testpack:echo", z.conj())
    assert torch.equal(back, z.conj().resolve_conj())
    neg = torch._neg_view(torch.randn(5))
    assert torch.equal(host_worker.call("airlock_testpack:echo", neg), neg.resolve_neg())


def test_big_endian_arrays_arrive_with_their_values(host_worker):
    a = np.arange(6, dtype=">f4").reshape(2, 3)
    back = host_worker.call("airlock_testpack:echo", a)
    assert back.dtype == np.float32 and np.array_equal(back, a)


def test_dense_layouts_keep_their_strides(host_worker):
    cl = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
    d = host_worker.call("airlock_testpack:describe", cl)
    assert d["strides"] == list(cl.stride())
    tr = torch.randn(8, 16).t()
    assert host_worker.call("airlock_testpack:describe", tr)["strides"] == list(tr.stride())


def test_gapped_views_arrive_contiguous(host_worker):
    v = torch.randn(10, 12)[::2, 1::3]
    d = host_worker.call("airlock_testpack:describe", v)
    assert d["shape"] == [5, 4] and d["strides"] == [4, 1]


def test_nested_containers_of_tensors(host_worker):
    latent = {"samples": torch.randn(1, 4, 8, 8), "batch_index": [0]}
    cond = [[torch.randn(1, 77, 32), {"pooled_output": torch.randn(1, 32)}]]
    back_latent, back_cond = host_worker.call("airlock_testpack:echo", latent, cond)
    same(latent["samples"], back_latent["samples"])
    assert back_latent["batch_index"] == [0]
    same(cond[0][0], back_cond[0][0])
    same(cond[0][1]["pooled_output"], back_cond[0][1]["pooled_output"])


@pytest.mark.parametrize(
    "array",
    [
        np.arange(24, dtype=np.float32).reshape(2, 3, 4),
        np.arange(24, dtype=np.int16).reshape(4, 6).T,
        np.arange(50, dtype=np.float64)[::-3],
        np.zeros((0, 4), dtype=np.uint8),
        np.array([1 + 2j, 3 - 4j], dtype=np.complex128),
        np.array([True, False, True]),
    ],
    ids=["contiguous", "transposed", "negative_stride", "empty", "complex", "bool"],
)
def test_numpy_arrays_round_trip(host_worker, array):
    back = host_worker.call("airlock_testpack:echo", array)
    assert isinstance(back, np.ndarray)
    assert back.dtype == array.dtype and back.shape == array.shape
    assert np.array_equal(back, array)


def test_received_views_are_zero_copy_and_leases_are_reused(host_worker):
    lane = host_worker.lane
    t = torch.randn(256, 1024)  # 1 MiB
    for _ in range(2):  # kept from its second send, in a frozen segment (ADR 0034)
        host_worker.call("airlock_testpack:echo", t)
    first = lane.stats()
    for _ in range(20):
        back = host_worker.call("airlock_testpack:echo", t)
        same(t, back)
        del back
    stats = lane.stats()
    # The pool did not grow with the number of calls. The echo hands our own region back
    # (tests/test_pass_on.py), so the worker allocated nothing, and its release of the last
    # argument waits for its next frame: the owner must hold the region for the reply's view
    # before the worker lets go of it. t's bytes are one kept copy (tests/test_kept.py).
    assert stats["segments"] == first["segments"], stats
    assert stats["peer_segments"] == 0, stats
    assert stats["leased_regions"] <= 1 + kept.stats(lane)["copies"], stats
    del t
    gc.collect()
    host_worker.call("airlock_testpack:echo", None)
    assert lane.stats()["leased_regions"] == 0, lane.stats()


def test_a_tensor_kept_by_the_worker_stays_leased_until_dropped(host_worker):
    lane = host_worker.lane
    host_worker.call("airlock_testpack:drop_kept")
    t = torch.ones(1000)
    host_worker.call("airlock_testpack:keep", t)
    host_worker.call("airlock_testpack:echo", None)  # lets the worker flush releases
    assert lane.stats()["leased_regions"] == 1
    t.zero_()  # the worker's copy lives in our region, not in t
    assert host_worker.call("airlock_testpack:echo", 1) == 1
    host_worker.call("airlock_testpack:drop_kept")
    host_worker.call("airlock_testpack:echo", None)
    assert lane.stats()["leased_regions"] == 0


def test_unsupported_type_is_a_clear_error_and_leaks_nothing(host_worker):
    lane = host_worker.lane
    before = lane.stats()["leased_regions"]
    with pytest.raises(TypeError, match=r"no codec is registered.*does not list it in `pickle`"):
        host_worker.call("airlock_testpack:echo", [torch.ones(10), object()])
    assert lane.stats()["leased_regions"] == before


def test_codecs_cross_both_ways(make_worker):
    import airlock_codecs

    w = make_worker(preload=["airlock_codecs"])
    p = w.call("airlock_codecs:move", airlock_codecs.Point(1, 2), 10)
    assert p == airlock_codecs.Point(11, 2)


def test_worker_without_torch_gets_numpy(make_worker):
    w = make_worker("py310")
    assert w.call("airlock_testpack:versions")["torch"] is None
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert w.call("airlock_testpack:describe", t)["type"] == "numpy.ndarray"
    back = w.call("airlock_testpack:echo", t)
    assert isinstance(back, np.ndarray) and np.array_equal(back, t.numpy())
    # bfloat16 has no numpy type there: it arrives as its raw uint16 bits, and comes back so.
    bf = random_tensor((4, 4), torch.bfloat16)
    raw = w.call("airlock_testpack:echo", bf)
    assert raw.dtype == np.uint16
    assert raw.tobytes() == bits(bf)


def test_worker_on_other_python_and_torch(make_worker):
    w = make_worker("py312")
    v = w.call("airlock_testpack:versions")
    assert v["python"].startswith("3.12") and v["torch"] != torch.__version__
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        t = random_tensor((2, 3, 4), dtype, seed=5)
        same(t, w.call("airlock_testpack:echo", t))
    cl = torch.randn(1, 3, 4, 4).to(memory_format=torch.channels_last)
    same(cl, w.call("airlock_testpack:echo", cl))


def test_worker_results_are_new_tensors(make_worker):
    w = make_worker("py312")
    out = w.call("airlock_testpack:fill", 1000, 2.5)
    assert out.dtype == torch.float32 and bool((out == 2.5).all())


def test_exports_are_typed_classes():
    assert issubclass(comfy_airlock.WorkerDied, comfy_airlock.AirlockError)
    assert issubclass(comfy_airlock.HandshakeError, comfy_airlock.ProtocolError)
    assert comfy_airlock.PROTOCOL_VERSION >= 1


def test_a_late_codec_registers_when_its_type_first_crosses(make_worker):
    # Its module is imported only by the side that makes a value of it and by the side that
    # receives one, each registering the codec once, then (ComfyUI's video types, whose module
    # imports PyAV, cross this way).
    import sys

    import airlock_late_codec

    assert "airlock_late_type" not in sys.modules and airlock_late_codec.REGISTERED == []
    w = make_worker(preload=["airlock_late_codec"])
    got = w.call("airlock_late_codec:make", 5)
    assert type(got).__name__ == "Late" and got.n == 5
    assert airlock_late_codec.REGISTERED == [1]  # decoding its name registered it here
    back, registered_there = w.call("airlock_late_codec:bump", got)
    assert back.n == 6 and registered_there == 1
    assert airlock_late_codec.REGISTERED == [1]


def test_a_late_codec_that_cannot_register_is_asked_again():
    from comfy_airlock import values

    calls = []

    def fails() -> None:
        calls.append(1)
        raise TypeError("its module does not import here")

    values.register_late_codec(("test.Never",), (("airlock_no_such", "Never"),), fails)
    try:
        for n in (1, 2):
            with pytest.raises(TypeError, match="does not import here"):
                values.decode_ext("test.Never", 0)
            assert len(calls) == n
    finally:
        values._LATE.pop(("airlock_no_such", "Never"), None)
        values._LATE_BY_NAME.pop("test.Never", None)


def test_a_record_fits_its_codec_only_if_every_attribute_crosses():
    # ComfyUI's MESH, VOXEL and SPLAT cross as their attributes (ADR 0063): one holding
    # something that cannot cross, or a named tuple (it would lose its fields), does not fit
    # and stays in its pack's worker.
    import collections
    import threading

    from comfy_airlock.comfy_values import _fields_cross

    class Record:
        pass

    r = Record()
    r.vertices, r.faces, r.unlit = torch.zeros(1, 4, 3), torch.zeros(1, 4, 3, dtype=torch.long), 0
    r.extra = {"uv": [torch.ones(2)], 3: (None, "x", np.zeros(2))}
    assert _fields_cross(r)
    r.extra[3] = (threading.Lock(),)
    assert not _fields_cross(r)
    r.extra = collections.namedtuple("Pair", "a b")(1, 2)
    assert not _fields_cross(r)

    class Slotted:  # no attribute dict: it cannot cross as its attributes
        __slots__ = ("vertices",)

    s = Slotted()
    s.vertices = torch.zeros(2)
    assert not _fields_cross(s)


def test_a_torch_size_crosses_as_a_size(make_worker):
    # A tensor's shape kept as a value (CLIP vision outputs keep their image sizes so) arrives
    # as a torch.Size, not as the plain tuple the core makes of a tuple subclass.
    w = make_worker()
    # A side that has not imported torch gets the tuple (equal to the Size).
    assert type(w.call("builtins:list", [torch.Size([3, 4])])[0]) is tuple
    made = w.call("torch:Size", [5, 6])  # the worker imports torch for it
    assert type(made) is torch.Size and made == (5, 6)
    back = w.call("builtins:list", [torch.Size([3, 4]), (1, 2)])
    assert type(back[0]) is torch.Size and back[0] == (3, 4) and type(back[1]) is tuple

"""Large values never break a healthy worker. ``bytes`` and ``str`` of 1 MiB or more travel in
shared memory as tensors do (both ways), and a value that cannot cross (over a million items,
nested too deep, more bytes than a frame) is refused on the sending side with
``ValueTooLarge`` before anything is written: the worker is the same process afterwards, no
rejection is counted, and nothing stays leased. A worker whose result cannot be sent answers
with an error instead of dying."""

from __future__ import annotations

import numpy as np
import pytest

import comfy_airlock
from comfy_airlock import _native

from .chaos import iterations

MIB = 1 << 20
ITEMS = 1 << 20  # the most items one value may have


def test_large_bytes_and_text_cross_both_ways(spawn, fault, leaks):
    run = fault("65 MiB bytes / 20 M-char str, to and from a worker")
    w = spawn()
    pid = w.call("fault_targets:pid")
    leaks.baseline_threads()
    big = bytes(range(256)) * (65 * MIB // 256)
    for i in range(iterations(3)):
        with run.iteration(i):
            assert w.call("fault_targets:echo", big) == big
            got = w.call("fault_targets:make_bytes", 65 * MIB, i)
            assert type(got) is bytes and len(got) == 65 * MIB and got[::MIB] == bytes([i]) * 65
            del got
            text = w.call("fault_targets:make_text", 20 * MIB, "é")
            assert type(text) is str and len(text) == 20 * MIB and text[-1] == "é"
            assert w.call("fault_targets:echo", text) == text
            del text
            ba = bytearray(b"\x01\x02") * MIB  # arrives as bytes
            assert w.call("fault_targets:echo", ba) == bytes(ba)
            # Many items just under the shared-memory size: more than a frame holds inline.
            many = [bytes([j]) * (900 * 1024) for j in range(80)]
            assert w.call("fault_targets:echo", many) == many
            assert w.call("fault_targets:pid") == pid
            run.outcome("crossed, same worker")
            run.check_leaks(i, leaks.check([w]))
    run.finish()


UNSENDABLE = {
    "1.1 M ints": (lambda: list(range(1_100_000)), "more than 1048576 items"),
    "129 levels": (lambda: _nested(129), "more than 128 levels deep"),
    "80 MiB of 60 KiB strings": (
        lambda: ["x" * (60 * 1024)] * 1400,
        "more than the 66060288 bytes of values one frame may carry",
    ),
}


def _nested(levels):
    v = 7
    for _ in range(levels):
        v = [v]
    return v


@pytest.mark.parametrize("kind", sorted(UNSENDABLE))
def test_an_argument_that_cannot_cross_is_refused_before_sending(spawn, fault, leaks, kind):
    make, words = UNSENDABLE[kind]
    run = fault(f"unsendable argument: {kind}")
    w = spawn()
    pid = w.call("fault_targets:pid")
    leaks.baseline_threads()
    value = make()
    tensor = np.ones(MIB, dtype=np.uint8)  # leased before the refusal: must come back
    for i in range(iterations(3)):
        with run.iteration(i):
            before = _native.rejections()
            with pytest.raises(comfy_airlock.ValueTooLarge, match=words) as info:
                w.call("fault_targets:echo", [tensor, value])
            assert "nothing was sent" in str(info.value)
            assert _native.rejections() == before, "our own value is nobody's protocol error"
            assert w.lane.stats()["leased_regions"] == 0
            assert w.call("fault_targets:pid") == pid, "the worker is untouched"
            assert w.call("fault_targets:checksum", tensor) == 256
            run.outcome("ValueTooLarge, same worker")
            run.check_leaks(i, leaks.check([w]))
    run.finish()


def test_the_deepest_and_largest_values_allowed_cross(spawn):
    w = spawn()
    # The arguments travel as one tuple: a container, and an item, of its own.
    assert w.call("fault_targets:echo", _nested(127)) == _nested(127)
    assert w.call("fault_targets:nested", 128) == _nested(128)
    most = list(range(ITEMS - 2))  # the tuple and the list are one item each
    assert w.call("fault_targets:echo", most) == most


@pytest.mark.parametrize(
    "target, arg, words",
    [
        ("fault_targets:many_ints", 1_100_000, "more than 1048576 items"),
        ("fault_targets:nested", 129, "more than 128 levels deep"),
    ],
    ids=["items", "depth"],
)
def test_a_result_that_cannot_cross_is_an_error_reply(spawn, fault, leaks, target, arg, words):
    run = fault(f"unsendable result: {target}")
    w = spawn()
    pid = w.call("fault_targets:pid")
    leaks.baseline_threads()
    for i in range(iterations(3)):
        with run.iteration(i):
            before = _native.rejections()
            with pytest.raises(comfy_airlock.RemoteError, match=words) as info:
                w.call(target, arg)
            assert "ValueTooLarge" in str(info.value)
            assert _native.rejections() == before
            assert w.call("fault_targets:pid") == pid, "the worker answered and lives on"
            run.outcome("error reply, same worker")
            run.check_leaks(i, leaks.check([w]))
    run.finish()

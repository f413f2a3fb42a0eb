"""A pack's own objects stay in its worker (ADR 0023): the real proxies and a real worker on
this interpreter, with a pack whose nodes hand each other an object of its own class. The
whole path through the real ComfyUI, natively and isolated, is in
tests/comfyui/test_native_parity.py (pack-objects)."""

from __future__ import annotations

import gc
import sys
import textwrap
import time

import pytest

from comfy_airlock.host.pack import IsolatedPack
from comfy_airlock.host.proxies import build_proxy
from comfy_airlock.pack_values import PackValue, PackValueError

PACK = """
class Thing:
    def __init__(self, n):
        self.n = n

    def __repr__(self):
        return f"Thing({self.n})"


class Make:
    RETURN_TYPES = ("THING", "INT")
    FUNCTION = "make"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"n": ("INT", {})}}

    def make(self, n):
        return (Thing(n), n)


class Use:
    RETURN_TYPES = ("INT",)
    FUNCTION = "use"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"thing": ("THING",)}}

    def use(self, thing):
        return (thing.n * 2,)


NODE_CLASS_MAPPINGS = {"Make": Make, "Use": Use}
"""


@pytest.fixture
def packs(tmp_path):
    made: list[IsolatedPack] = []

    def make(name: str, source: str = PACK) -> tuple[IsolatedPack, type, type]:
        d = tmp_path / name
        d.mkdir()
        (d / "__init__.py").write_text(textwrap.dedent(source))
        p = IsolatedPack(
            name=name,
            dir=str(d),
            python=sys.executable,
            env_dir=sys.prefix,
            env_key="test",
            comfy=False,
        )
        made.append(p)
        nodes = p.scan()["nodes"]
        return p, build_proxy(p, "Make", nodes["Make"]), build_proxy(p, "Use", nodes["Use"])

    yield make
    for p in made:
        p.close()


def _held(p: IsolatedPack) -> int:
    return p.worker().call("comfy_airlock.pack_values:held")


def test_an_object_of_the_pack_goes_to_its_next_node_as_itself(packs):
    _, make, use = packs("objects")
    thing, n = make().make(n=21)
    assert isinstance(thing, PackValue) and n == 21  # plain values cross as before
    assert str(thing) == repr(thing) == "Thing(21)"  # the repr the worker saw
    assert use().use(thing=thing) == (42,)
    assert use().use(thing=[thing][0]) == (42,)
    with pytest.raises(AttributeError, match="lives in that pack's worker"):
        thing.n  # noqa: B018  (a node of ComfyUI's reading it)


# The pack's Thing has a codec that takes only some of its instances (``fits``), as ComfyUI's
# MESH does (an attribute nothing can send keeps it in the worker, ADR 0063).
FITTING = (
    PACK
    + """
import comfy_airlock

comfy_airlock.register_codec(
    "test.FitThing", Thing, lambda t: t.n, Thing, fits=lambda t: t.n >= 0
)
"""
)


class HostThing:
    def __init__(self, n):
        self.n = n


def test_an_instance_its_codec_does_not_fit_stays_in_the_worker(packs):
    import comfy_airlock

    comfy_airlock.register_codec("test.FitThing", HostThing, lambda t: t.n, HostThing)
    p, make, use = packs("fitting", FITTING)
    crossed, _ = make().make(n=4)
    assert type(crossed) is HostThing and crossed.n == 4  # it fits: made again here
    kept, _ = make().make(n=-3)
    assert isinstance(kept, PackValue) and str(kept) == "Thing(-3)"  # it does not: a reference
    assert use().use(thing=kept) == (-6,)  # and the pack's node gets the object back
    assert _held(p) == 1


def test_values_comfyui_lets_go_of_are_released_in_the_worker(packs):
    p, make, use = packs("objects")
    things = [make().make(n=i)[0] for i in range(5)]
    assert _held(p) == 5
    del things[:4]
    gc.collect()
    # Released with the next call to the pack.
    assert use().use(thing=things[0]) == (8,)
    assert _held(p) == 1


def test_another_packs_value_is_refused_before_the_call(packs):
    _, make_a, _ = packs("pack-a")
    b, _, use_b = packs("pack-b")
    thing = make_a().make(n=1)[0]
    with pytest.raises(PackValueError, match="Thing of the isolated pack 'pack-a' was used"):
        use_b().use(thing=thing)
    calls = b.stats.calls
    assert calls == 1  # the scan only: nothing was sent to pack-b's worker


def test_a_value_of_an_earlier_worker_is_a_clear_error(packs):
    p, make, use = packs("objects")
    thing = make().make(n=3)[0]
    p.worker().kill()
    deadline = time.monotonic() + 10
    while p.alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(Exception, match="made by an earlier worker of this pack"):
        use().use(thing=thing)
    assert use().use(thing=make().make(n=4)[0]) == (8,)

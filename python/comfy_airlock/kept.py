"""Kept copies: a tensor the host sends again, unchanged, goes without a second copy.

The same IMAGE into several isolated nodes, a cached output fed again on the next prompt: the
host copies a tensor into shared memory for each call, although its bytes did not change. So the
host keeps the copy it made, in a *frozen* segment of its pool (sealed against writes through
any mapping but the pool's own: the worker, and our own views, map it privately, so no view
can change it), holds the region, and watches the tensor's memory for writes
(:class:`comfy_airlock._native.WriteWatch`: the kernel's write-protection of those pages, read
back per send). Sent again while no page was written, the tensor travels as a reference to the
kept region, like a tensor passed on.

Why the memory and not torch's version counter decides, and what that covers (writes through
numpy, a raw pointer, another tensor on the same storage, another thread, the kernel): ADR
0027. The version counter is checked too, as a cheap early answer for the same tensor object.

Only the host keeps copies, of dense tensors and arrays of at least ``MIN_BYTES``, up to
``settings.keep_sent`` per worker (default 1024; 0 turns keeping off); the least recently
sent go first. A tensor is kept from its *second* send (ADR 0034): starting a watch and
ending it when the tensor dies cost a tensor sent once (the fresh outputs most nodes pass on)
more than a copy saves, so a first send is only remembered, by a weak reference to the same
object. A copy goes when its tensor dies, when it is found changed (a new one is made), and
when the host trims an idle worker's memory (:func:`drop_all`).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from comfy_airlock import _native, settings

MIN_BYTES = 1 << 20
_KEY = "kept"
#: First sends remembered per lane (a weak reference each; the oldest forgotten first).
SEEN_MAX = 256


def _budget() -> int:
    return settings.get().keep_sent


@dataclass(eq=False)
class _Entry:
    region: tuple[int, int, int, int]
    watch: Any  # _native.WriteWatch, or None once its source died
    version: int
    source: weakref.ref
    gone: bool = False


class _Kept:
    """One lane's kept copies by ``(address, nbytes)``, least recently sent first.

    The lane holds it (in ``lane.mappings``); it holds the lane's ``releaser`` rather than the
    lane, so a source that dies on any thread gives its region back at once."""

    def __init__(self, release) -> None:
        self.entries: OrderedDict[tuple[int, int], _Entry] = OrderedDict()
        self.bytes = 0
        self.release = release
        self.budget = _budget()
        # The calling thread, sources dying on any thread, and the idle trim.
        self.lock = threading.RLock()
        # Sent once, not kept: (address, nbytes) -> a weak reference to the object sent.
        self.seen: OrderedDict[tuple[int, int], weakref.ref] = OrderedDict()
        self.reused = 0  # sends that went as a reference to a kept copy
        self.copied = 0  # kept copies made (second sends, and sends after a write)

    def forget(self, key: tuple[int, int], entry: _Entry) -> None:
        # Once per entry: its source's death may come after it was replaced or evicted.
        with self.lock:
            if entry.gone:
                return
            entry.gone = True
            if self.entries.get(key) is entry:
                del self.entries[key]
                self.bytes -= entry.region[3]
            entry.watch = None
            self.release(*entry.region)


def _state(lane) -> _Kept:
    kept = lane.mappings.get(_KEY)
    if kept is None:
        kept = lane.mappings[_KEY] = _Kept(lane.releaser())
    return kept


def region_for(lane, obj, addr: int, nbytes: int, version: int):
    """A region holding ``obj``'s ``nbytes`` bytes from ``addr`` for the frame being encoded,
    with a hold for the peer: the kept copy when nothing wrote that memory since it was made,
    else a new kept copy (copied here). None when the tensor is not kept: too small, keeping
    is off, or its memory cannot be watched; the caller copies as before."""
    kept = _state(lane)
    if nbytes < MIN_BYTES or nbytes > kept.budget:
        return None
    with kept.lock:
        return _region_for(lane, kept, obj, (addr, nbytes), version)


def _region_for(lane, kept: _Kept, obj, key: tuple[int, int], version: int):
    addr, nbytes = key
    entry = kept.entries.get(key)
    # A local reference: the source of an entry may die on another thread meanwhile.
    watch = entry.watch if entry is not None else None
    if watch is not None:
        unchanged = watch.unchanged()  # re-arms the watch when it was written
        same = entry.source() is not obj or entry.version == version
        if unchanged and same:
            lane.hold_own(*entry.region)
            kept.entries.move_to_end(key)
            kept.reused += 1
            return entry.region
        kept.forget(key, entry)
    else:
        if not _sent_before(kept, key, obj):
            return None
        watch = _native.WriteWatch.start(addr, nbytes)
        if watch is None:
            return None
    _make_room(kept, nbytes)
    region = lane.alloc(nbytes, frozen=True)
    try:
        lane.write(region, addr, nbytes)
        lane.hold_own(*region)  # the kept copy's own hold
    except BaseException:
        lane.unalloc(*region)
        raise
    entry = _Entry(region, watch, version, weakref.ref(obj))
    entry.source = weakref.ref(obj, lambda _, k=kept, key=key, e=entry: k.forget(key, e))
    kept.entries[key] = entry
    kept.bytes += nbytes
    kept.copied += 1
    return region


def _sent_before(kept: _Kept, key: tuple[int, int], obj: Any) -> bool:
    """Whether ``obj`` itself was sent before from this memory (then it is kept from now on);
    remembers it when not. Only ever decides whether to keep, never whether to reuse: a wrong
    answer costs a copy, not stale bytes."""
    ref = kept.seen.pop(key, None)
    if ref is not None and ref() is obj:
        return True
    try:
        kept.seen[key] = weakref.ref(obj)
    except TypeError:  # not weakly referable: never kept
        return False
    while len(kept.seen) > SEEN_MAX:
        kept.seen.popitem(last=False)
    return False


def _make_room(kept: _Kept, nbytes: int) -> None:
    while kept.entries and kept.bytes + nbytes > kept.budget:
        key, entry = next(iter(kept.entries.items()))
        kept.forget(key, entry)


def drop_all(lane) -> int:
    """Drops every kept copy of this lane (their regions go once the peer has released them);
    returns the bytes they held."""
    kept = lane.mappings.get(_KEY)
    if kept is None:
        return 0
    with kept.lock:
        held = kept.bytes
        kept.seen.clear()
        for key, entry in list(kept.entries.items()):
            kept.forget(key, entry)
    return held


def stats(lane) -> dict[str, int]:
    """``bytes`` and ``copies`` kept now; ``reused``: sends that went without a copy;
    ``copied``: kept copies made."""
    kept = lane.mappings.get(_KEY) or _Kept(None)
    return {
        "bytes": kept.bytes,
        "copies": len(kept.entries),
        "reused": kept.reused,
        "copied": kept.copied,
    }

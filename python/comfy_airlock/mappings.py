"""Our mappings of shared-memory segments, for the tensor codec (:mod:`comfy_airlock.values`).

Each lane keeps them in ``lane.mappings``: ``(side, segment) -> mmap``, dropped when the core
says a segment was retired (a view keeps its mapping alive until it dies).

A *frozen* segment (sealed against writes through any mapping but its owner pool's: kept
copies, ADR 0027) is mapped privately, by its owner's Python side as by the peer. A view
written in place then writes this process's own copies of those pages, never the segment:
before a new view of a region is made such copies are dropped (or, if a live view of that
region still shows them, the new view gets a mapping of its own), and a view with such pages
is copied rather than passed on by reference.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import mmap
import os
import threading

from comfy_airlock import _native

_POPULATE = getattr(mmap, "MAP_POPULATE", 0)

# A peer's segment is mapped lazily: its pages are the peer's to allocate, and a hostile peer
# can announce a sparse segment much larger than what it references (populating all of it
# would make us commit every page). Only the range a descriptor references is populated, once,
# in chunks. Our own segments are fully allocated by us and mapped populated.
_CHUNK = 2 << 20
_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)  # Linux 5.14; older kernels fault
_POPULATED_KEY = "populated"
# (side, segment) -> address of our private mapping of a frozen segment.
_FROZEN_KEY = "frozen"
# values.py's live views: buffer address -> [region, count].
_RECEIVED_KEY = "received"
_F_GET_SEALS = getattr(fcntl, "F_GET_SEALS", 1034)
# Making a view and trimming (idle_trim.py, another thread) both change a lane's mappings.
_LOCK = threading.RLock()
_F_SEAL_FUTURE_WRITE = 0x0010
_HOST_SIDE = 0  # ``lane.side`` of the host (the core's ``Side::Host``)


def _is_frozen(fd: int) -> bool:
    try:
        return bool(fcntl.fcntl(fd, _F_GET_SEALS) & _F_SEAL_FUTURE_WRITE)
    except OSError:
        return False


def _address(mm: mmap.mmap) -> int:
    probe = ctypes.c_char.from_buffer(mm)
    try:
        return ctypes.addressof(probe)
    finally:
        del probe  # the export would keep the mapping from closing


def _mapping(lane, side: int, segment: int) -> mmap.mmap:
    maps = lane.mappings
    mm = maps.get((side, segment))
    if mm is None:
        populated = maps.setdefault(_POPULATED_KEY, {})
        frozen = maps.setdefault(_FROZEN_KEY, {})
        for key in lane.take_unmapped():
            maps.pop(key, None)  # views keep their mapping alive until they die
            populated.pop(key, None)
            frozen.pop(key, None)
        fd, size = lane.segment_fd(side, segment)
        private = _is_frozen(fd)
        lazy = private or side != lane.side
        try:
            # A private mapping is populated for reading only, chunk by chunk: populating it
            # whole (MAP_POPULATE, writable) would copy every page.
            flags = mmap.MAP_PRIVATE if private else mmap.MAP_SHARED
            mm = mmap.mmap(fd, size, flags=flags | (0 if lazy else _POPULATE))
        finally:
            os.close(fd)
        maps[(side, segment)] = mm
        if lazy:
            populated[(side, segment)] = bytearray(-(-size // _CHUNK))
        if private:
            base = frozen[(side, segment)] = _address(mm)
            if side == lane.side or lane.side != _HOST_SIDE:
                # Before any page is read in: each one then comes in protected, and a write
                # through the mapping shows in the kernel's written-only scan (ADR 0039).
                # Not a worker's segment in the host: kept copies are the host's, and arming
                # makes page tables for the whole size a peer announced.
                _native.watch_private(base, size)
    return mm


def _populate(lane, key, mm: mmap.mmap, offset: int, nbytes: int) -> None:
    """Fills the page tables of the chunks of a peer's segment that ``[offset, offset +
    nbytes)`` touches and that no earlier view populated (reading them then never faults)."""
    done = lane.mappings[_POPULATED_KEY].get(key)
    if done is None or nbytes <= 0:
        return
    lo, hi = offset // _CHUNK, (offset + nbytes - 1) // _CHUNK + 1
    at = done.find(0, lo, hi)
    while at != -1:
        end = done.find(1, at, hi)
        end = hi if end == -1 else end
        start, stop = at * _CHUNK, min(end * _CHUNK, len(mm))
        # On an older kernel the reads fault the pages in instead.
        with contextlib.suppress(OSError, ValueError):
            mm.madvise(_POPULATE_READ, start, stop - start)
        done[at:end] = b"\x01" * (end - at)
        at = done.find(0, end, hi)


def _own_copies(base: int, offset: int, nbytes: int) -> list[tuple[int, int]]:
    """Offsets ``[(start, end)]`` of our own copies of pages in ``[offset, offset + nbytes)``
    of a private mapping at ``base``; all of it when the kernel cannot say."""
    pages = _native.private_pages(base + offset, nbytes)
    if pages is None:
        lo = offset - offset % mmap.PAGESIZE
        return [(lo, offset + nbytes)]
    return [(start - base, end - base) for start, end in pages]


def _viewed(lane, base: int, offset: int, nbytes: int) -> bool:
    """Whether a live view lies on ``[offset, offset + nbytes)`` of the mapping at ``base``."""
    lo, hi = base + offset, base + offset + nbytes
    received = lane.mappings.get(_RECEIVED_KEY, {})
    return any(lo < addr + entry[0][3] and addr < hi for addr, entry in received.items())


def _own_view(lane, region) -> ctypes.Array:
    """A view of ``region`` through a private mapping of its own, dropped with the view."""
    side, segment, offset, nbytes = region
    fd, _ = lane.segment_fd(side, segment)
    lo = offset - offset % mmap.ALLOCATIONGRANULARITY
    try:
        mm = mmap.mmap(fd, offset + nbytes - lo, flags=mmap.MAP_PRIVATE, offset=lo)
    finally:
        os.close(fd)
    with contextlib.suppress(OSError, ValueError):
        mm.madvise(_POPULATE_READ)
    return (ctypes.c_char * nbytes).from_buffer(mm, offset - lo)


def region_buffer(lane, region) -> ctypes.Array:
    with _LOCK:
        return _region_buffer(lane, region)


def _region_buffer(lane, region) -> ctypes.Array:
    side, segment, offset, nbytes = region
    mm = _mapping(lane, side, segment)
    if offset < 0 or nbytes < 0 or offset + nbytes > len(mm):
        raise ValueError(
            f"region of {nbytes} bytes at offset {offset} lies outside segment {segment} "
            f"({len(mm)} bytes)"
        )
    key = (side, segment)
    base = lane.mappings[_FROZEN_KEY].get(key)
    if base is not None and nbytes > 0:
        copies = _own_copies(base, offset, nbytes)
        if copies:
            if _viewed(lane, base, offset, nbytes):
                return _own_view(lane, region)
            done = lane.mappings[_POPULATED_KEY][key]
            for start, end in copies:
                # Back to the segment's own pages (read in again by _populate below), watched
                # again: an entry emptied reads as written until it is.
                mm.madvise(mmap.MADV_DONTNEED, start, end - start)
                _native.watch_private(base + start, end - start)
                done[start // _CHUNK : (end - 1) // _CHUNK + 1] = bytes(
                    (end - 1) // _CHUNK + 1 - start // _CHUNK
                )
    _populate(lane, key, mm, offset, nbytes)
    return (ctypes.c_char * nbytes).from_buffer(mm, offset)


def written_privately(lane, region, addr: int, nbytes: int) -> bool:
    """Whether ``[addr, addr + nbytes)``, a view of ``region``, holds pages this process wrote
    through a private mapping of a frozen segment (then the segment does not hold its bytes)."""
    # One lookup, atomic under the GIL: no lock (this runs for every tensor passed back).
    if (region[0], region[1]) not in lane.mappings.get(_FROZEN_KEY, {}):
        return False
    pages = _native.private_pages(addr, nbytes)
    return pages is None or bool(pages)


def drop_all(lane) -> None:
    """Drops our mappings of every segment (a live view keeps its own alive): the pages they
    showed leave our page tables; the next view maps and populates its segment again."""
    with _LOCK:
        maps = lane.mappings
        lane.take_unmapped()
        for key in [k for k in maps if isinstance(k, tuple)]:
            del maps[key]
        maps.get(_POPULATED_KEY, {}).clear()
        maps.get(_FROZEN_KEY, {}).clear()

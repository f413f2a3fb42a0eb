"""Our mappings of shared-memory segments, for the tensor codec (:mod:`comfy_airlock.values`).

Each lane keeps them in ``lane.mappings``: ``(side, segment) -> mmap``, dropped when the core
says a segment was retired (a view keeps its mapping alive until it dies).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os

_POPULATE = getattr(mmap, "MAP_POPULATE", 0)

# A peer's segment is mapped lazily: its pages are the peer's to allocate, and a hostile peer
# can announce a sparse segment much larger than what it references (populating all of it
# would make us commit every page). Only the range a descriptor references is populated, once,
# in chunks. Our own segments are fully allocated by us and mapped populated.
_CHUNK = 2 << 20
_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)  # Linux 5.14; older kernels fault
_POPULATED_KEY = "populated"


def _mapping(lane, side: int, segment: int) -> mmap.mmap:
    maps = lane.mappings
    mm = maps.get((side, segment))
    if mm is None:
        populated = maps.setdefault(_POPULATED_KEY, {})
        for key in lane.take_unmapped():
            maps.pop(key, None)  # views keep their mapping alive until they die
            populated.pop(key, None)
        fd, size = lane.segment_fd(side, segment)
        own = side == lane.side
        try:
            mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | (_POPULATE if own else 0))
        finally:
            os.close(fd)
        maps[(side, segment)] = mm
        if not own:
            populated[(side, segment)] = bytearray(-(-size // _CHUNK))
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


def region_buffer(lane, region) -> ctypes.Array:
    side, segment, offset, nbytes = region
    mm = _mapping(lane, side, segment)
    if offset < 0 or nbytes < 0 or offset + nbytes > len(mm):
        raise ValueError(
            f"region of {nbytes} bytes at offset {offset} lies outside segment {segment} "
            f"({len(mm)} bytes)"
        )
    _populate(lane, (side, segment), mm, offset, nbytes)
    return (ctypes.c_char * nbytes).from_buffer(mm, offset)

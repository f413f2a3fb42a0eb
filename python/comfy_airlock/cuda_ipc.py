"""A CUDA tensor crosses by CUDA IPC: the receiver opens the sender's memory and copies it on
the card (ADR 0041).

Why: through host memory a CUDA tensor is copied off the card, into shared memory and back on
at the other side, which on one H200 cost 0.47 s for a 1 GiB round trip, where a copy on the
card takes 0.5 ms (docs/benchmarks.md, "GPU figures"). Here the sender exports the tensor's
allocation with torch's own CUDA IPC (``reduce_tensor``: the handle, torch's reference counter
for it, and an event its pending writes are ordered by), the payload crosses as plain values
(bytes and numbers, no pickle), and the receiver opens it (``rebuild_cuda_tensor``), copies it
into memory of its own on the same card, waits for that copy and lets go of the sender's.

Why a copy on receipt rather than the sender's memory itself: the value then lives exactly as a
host-memory crossing makes it live. A worker's output does not die with the worker (a cached
output in ComfyUI outlives a worker's restart), a node writing into its input in place does not
write into ComfyUI's tensor, and the sender's memory is borrowed only for the copy. torch's
reference counter keeps a block the sender frees meanwhile out of its allocator until the
receiver has let go.

Used only where CUDA IPC can work: a tensor on a CUDA device, the sender's ``cuda_ipc`` setting
on, and torch able to export its memory (``_share_cuda_`` refuses memory of some allocators,
and on Windows); otherwise the tensor goes through host memory as before. The receiver finds
the card by its UUID, not its index, so that processes numbering the cards differently agree.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from comfy_airlock import device, settings

log = logging.getLogger("comfy_airlock")

#: The codec name the payload crosses under (an ext value, like a registered codec's).
CODEC = "airlock.cuda_ipc"

_UUIDS: dict[int, str | None] = {}  # device index -> its UUID, in this process's numbering


def _uuid(index: int) -> str | None:
    if index not in _UUIDS:
        _UUIDS[index] = device.cuda_uuid(index)
    return _UUIDS[index]


def _index(torch: Any, uuid: str) -> int:
    for index in range(torch.cuda.device_count()):
        if _uuid(index) == uuid:
            return index
    raise RuntimeError(
        f"received a CUDA tensor on the card {uuid}, which this process does not see "
        "(CUDA_VISIBLE_DEVICES differs between ComfyUI and the worker?)"
    )


def share(torch: Any, t: Any) -> tuple | None:
    """The payload by which the peer opens ``t``'s memory, or None when it goes through host
    memory instead (not on a CUDA device, switched off, or torch cannot export it)."""
    if t.device.type != "cuda" or t.numel() == 0 or not settings.get().cuda_ipc:
        return None  # an empty tensor has no memory to open: it crosses as its shape
    try:
        from torch.multiprocessing.reductions import reduce_tensor

        _rebuild, args = reduce_tensor(t.detach())
        index, handle, nbytes, storage_offset = args[6:10]
        ref_handle, ref_offset, event_handle, event_sync = args[11:15]
        return (
            str(t.dtype).removeprefix("torch."),
            tuple(t.shape),
            tuple(t.stride()),
            int(t.storage_offset()),
            _uuid(int(index)),
            bytes(handle),
            int(nbytes),
            int(storage_offset),
            bytes(ref_handle),
            int(ref_offset),
            None if event_handle is None else bytes(event_handle),
            bool(event_sync),
        )
    except Exception as e:  # an allocator or a platform without CUDA IPC
        log.debug("a CUDA tensor goes through host memory: %s", e)
        return None


def receive(payload: Any) -> Any:
    """A tensor of the receiver's own with the bytes ``payload`` names (see the module doc)."""
    if not (isinstance(payload, (tuple, list)) and len(payload) == 12):
        raise TypeError("a CUDA IPC tensor of the wrong shape: refused")
    (dtype, size, stride, offset, uuid, handle, nbytes, storage_offset) = payload[:8]
    ref_handle, ref_offset, event_handle, event_sync = payload[8:]
    torch = sys.modules.get("torch")
    if torch is None:
        import torch  # the sender had a CUDA tensor: this side needs torch to take it
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    index = _index(torch, str(uuid))
    theirs = rebuild_cuda_tensor(
        torch.Tensor,
        torch.Size(size),
        tuple(stride),
        int(offset),
        torch.storage.TypedStorage,
        getattr(torch, str(dtype)),
        index,
        bytes(handle),
        int(nbytes),
        int(storage_offset),
        False,
        bytes(ref_handle),
        int(ref_offset),
        None if event_handle is None else bytes(event_handle),
        bool(event_sync),
    )
    ours = theirs.clone()  # same strides where dense; on this process's current stream
    # The sender may reuse its block once we let go of it: the copy must be done first.
    torch.cuda.current_stream(index).synchronize()
    del theirs
    return ours

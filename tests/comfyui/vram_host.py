"""The GPU edge for a scenario host in which upstream runs in a real VRAM state (NORMAL_VRAM,
LOW_VRAM): torch's CUDA queries that upstream's ``comfy.model_management`` makes, answered
from the simulated card. Test host only (``scenario_host.py`` with ``SCENARIO_VRAM``); the
product never touches the host's torch.

Upstream reads free memory as ``mem_get_info`` plus what torch's allocator holds unused
(``reserved - active`` of ``memory_stats``): nothing allocates through torch here, so the
allocator holds nothing, and ``mem_get_info`` is what this process reads on the card
(``free_seen_by``: the device's free memory device-wide, its own budget on WDDM), as
``cudaMemGetInfo`` answers on each platform. Everything else is a constant of a plausible
card or a no-op (``synchronize``, ``empty_cache``: no allocator to flush).
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

# What upstream reads before a scenario made its card (its import logs the total).
_DEFAULT_TOTAL = 16 << 30


def fake_cuda(torch: Any, card: list) -> None:
    """Answers ``torch.cuda``'s queries from ``card[0]`` (a list, so a scenario may swap the
    card in later)."""
    cuda = torch.cuda

    def mem_get_info(device: Any = None) -> tuple[int, int]:
        if not card:
            return _DEFAULT_TOTAL, _DEFAULT_TOTAL
        return tuple(card[0].mem_get_info(os.getpid()))

    def props(device: Any = None) -> SimpleNamespace:
        total = card[0].total if card else _DEFAULT_TOTAL
        return SimpleNamespace(
            name="airlock simulated GPU",
            total_memory=total,
            major=8,
            minor=9,
            multi_processor_count=1,
            gcnArchName="",
        )

    answers = {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": lambda device: None,
        "mem_get_info": mem_get_info,
        "memory_stats": lambda device=None: {
            "active_bytes.all.current": 0,
            "reserved_bytes.all.current": 0,
        },
        "memory_reserved": lambda device=None: 0,
        "memory_allocated": lambda device=None: 0,
        "get_device_properties": props,
        "get_device_name": lambda device=None: "airlock simulated GPU",
        "get_device_capability": lambda device=None: (8, 9),
        "is_bf16_supported": lambda *a, **k: True,
        "get_allocator_backend": lambda: "native",
        "synchronize": lambda device=None: None,
        "empty_cache": lambda: None,
        "ipc_collect": lambda: None,
    }
    for name, fn in answers.items():
        setattr(cuda, name, fn)

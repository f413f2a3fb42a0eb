"""The stand-in: what a worker's model looks like in the host's ``current_loaded_models``.

Upstream ComfyUI's memory manager (``free_memory``, ``load_models_gpu``, ``unload_all_models``)
duck-types the patcher of each entry; a stand-in has exactly that surface (see
``docs/adr/0007-memory-bridge.md`` and the drift canary in ``tests/comfyui``) and obeys its
arguments: ``detach(unpatch_all=False)`` moves nothing and sends nothing, ``detach(True)``
unloads fully (upstream passes no amount, and nothing here reads one from its frames: ADR 0030),
``partially_unload`` returns the bytes the worker really freed (measured after it
emptied its allocator cache, because upstream re-reads free memory right after), and
``partially_load`` passes upstream's budget through unchanged (``1e32``, ``0.1``, bytes, or a
negative amount to shrink by).

Every command carries ``(generation, model id)``; one for a generation that is gone is refused
without being sent. Nothing here ever raises into upstream's loop: a failed command frees 0
bytes, which upstream answers by detaching and dropping the entry, as it would for its own.

A stand-in knows its worker only as a handle (``shapes.WorkerHandle``: a name and the control
lane's ``model_command``) and hands the report each command returns to a callback (the ledger's
``refresh``): it never reaches a pack or the ledger itself.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable
from typing import Any

from comfy_airlock.host.memory.reserve import RESERVE
from comfy_airlock.host.memory.shapes import ModelRow, WorkerHandle, WorkerReport

#: What a stand-in does with the report a command returns: ``(handle, generation, report)``.
OnReport = Callable[[WorkerHandle, int, WorkerReport], None]

log = logging.getLogger("comfy_airlock")


class ModelHandle:
    """The stand-in's ``.model``: the object upstream weak-references as the "real model".
    It lives exactly as long as the stand-in is ours; when we let go, upstream's own finalizer
    (``cleanup_models``) removes any entry still holding it."""

    __slots__ = ("__weakref__", "model_id", "name", "pack")

    def __init__(self, pack: str, model_id: int, name: str) -> None:
        self.pack = pack
        self.model_id = model_id
        self.name = name

    def __repr__(self) -> str:
        return f"<worker model {self.name} #{self.model_id} of pack {self.pack!r}>"


class StandIn:
    """One model of one worker generation, as upstream's ledger sees it."""

    def __init__(
        self, handle: WorkerHandle, generation: int, row: ModelRow, on_report: OnReport
    ) -> None:
        import torch

        self.handle = handle
        self._on_report = on_report
        self.generation = generation
        self.model = ModelHandle(handle.name, int(row["id"]), str(row["name"]))
        self.load_device = torch.device(row["device"])
        self.offload_device = torch.device("cpu")
        self.parent = None
        self.clone_base_uuid = uuid.uuid4()
        self.size = int(row["size"])
        self.resident = int(row["resident"])
        self.seq = int(row["seq"])
        self.in_use = bool(row.get("in_use"))
        self.last_used = float(row.get("last_used") or 0.0)
        # Set while we insert the entry ourselves: upstream's model_load then asks to load
        # what the worker has already loaded.
        self.registering = False
        # The worker died or was replaced: nothing is resident any more, nothing is sent.
        self.gone = False
        # The newest worker report that listed it (its ``seq``; 0: a report without one).
        self.report_seq = 0

    # --- what upstream reads ------------------------------------------------------------

    def model_size(self) -> int:
        return self.size

    def loaded_size(self) -> int:
        return 0 if self.gone else self.resident

    def current_loaded_device(self) -> Any:
        return self.load_device if self.loaded_size() > 0 else self.offload_device

    def model_dtype(self) -> None:
        return None

    def is_dynamic(self) -> bool:
        return False

    def is_clone(self, other: Any) -> bool:
        return getattr(other, "model", None) is self.model

    def model_patches_models(self) -> list[Any]:
        return []

    def lowvram_patch_counter(self) -> int:
        return 0

    def loaded_ram_size(self) -> int:
        return 0

    def get_nested_additional_models(self) -> list[Any]:
        return []

    # --- what upstream asks -------------------------------------------------------------

    def model_patches_to(self, device: Any) -> None:
        """Patches live with the weights, in the worker."""

    def partially_load(
        self, device: Any, extra_memory: float, force_patch_weights: bool = False
    ) -> int:
        if self.registering:
            return 0
        return self.command("partially_load", float(extra_memory))

    def partially_unload(
        self, device_to: Any, memory_to_free: float = 0, force_patch_weights: bool = False
    ) -> int:
        # Upstream asks in terms of the host's reading, which on a blind platform (WDDM) has not
        # seen what other processes freed since the reserve was published: ask the worker for
        # the rest only, and answer in upstream's terms (reserve.py; 0 device-wide).
        unseen = RESERVE.unseen(self.load_device)
        want = float(memory_to_free) - unseen
        if want <= 0:
            return math.ceil(memory_to_free)
        return max(0, self.command("partially_unload", want) + unseen)

    def partially_unload_ram(self, ram_to_free: float, subsets: Any = None) -> int:
        return 0

    def detach(self, unpatch_all: bool = True) -> None:
        # unpatch_all=False is upstream re-registering a clone: the weights stay where they
        # are, so nothing may move and nothing is sent.
        if not unpatch_all:
            return
        # Upstream says only that the entry goes (``model_unload`` passes no amount): the
        # worker unloads the model whole, as a ModelPatcher's detach does. On a blind platform
        # this evicts more than upstream's request still lacks, never less (ADR 0030).
        self.command("unload", 0.0)

    # --- ours ---------------------------------------------------------------------------

    def absent(self, report_seq: int) -> None:
        """A worker report newer than any that listed this model does not list it: the worker
        no longer holds it (it unloaded it whole, or the pack let go)."""
        if report_seq <= self.report_seq or self.resident <= 0:
            return
        self.report_seq = report_seq
        self.resident = 0
        RESERVE.released()

    def update(self, row: ModelRow) -> bool:
        """Takes a newer report of this model; an older one never overwrites a newer one."""
        seq = int(row["seq"])
        self.in_use = bool(row.get("in_use"))
        self.last_used = float(row.get("last_used") or self.last_used)
        if seq < self.seq:
            return False
        self.seq = seq
        self.size = int(row["size"])
        resident = int(row["resident"])
        if resident < self.resident:
            RESERVE.released()
        self.resident = resident
        return True

    def command(self, op: str, arg: float) -> int:
        """Sends ``op`` to the worker; returns the bytes it freed or loaded (0 on a refusal or
        a failure, which never raises)."""
        if self.gone:
            return 0
        try:
            done, refusal, report = self.handle.model_command(
                self.generation, self.model.model_id, op, arg
            )
        except Exception as e:  # the worker died mid-command: nothing freed, nothing raised
            log.warning("[comfy-airlock] %s: %s failed: %s", self.model, op, e)
            self.gone = True
            return 0
        if report:
            self._on_report(self.handle, self.generation, report)
        if refusal:
            log.debug("[comfy-airlock] %s: %s refused: %s", self.model, op, refusal)
            return 0
        return int(done)

    def __repr__(self) -> str:
        return (
            f"<StandIn {self.model!r} gen={self.generation} {self.load_device} "
            f"{self.resident}/{self.size} bytes>"
        )

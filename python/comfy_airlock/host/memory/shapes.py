"""What the memory bridge passes around, as types: a worker's report and its model rows, an
arbiter candidate, an admission's request and answer, and the worker handle every policy works
through (``host/pack.py``'s ``IsolatedPack`` is one).

The wire still carries these as plain dicts (``_native`` converts them); the types say which keys
each side reads. Nothing here imports anything of ours: every module of the package may use it.
"""

from __future__ import annotations

from typing import Any, Protocol, TypedDict


class _Row(TypedDict):
    id: int
    name: str
    device: str
    size: int
    resident: int
    seq: int


class ModelRow(_Row, total=False):
    """One model a worker holds (``worker/models.py``): its size, resident bytes on
    ``device``, and ``seq``, bumped whenever its residency changes (an older row never
    overwrites a newer one)."""

    kind: str  # "patcher" (the worker's own ComfyUI ledger) or "module" (registered)
    in_use: bool  # the running node uses it: never evicted
    last_used: float  # wall clock, comparable across workers


class WorkerReport(TypedDict, total=False):
    """What a worker holds, after every call that changed it and on the heartbeat."""

    pid: int
    seq: int  # after every row's: a model a newer report does not list is gone
    reserved: int  # its torch allocator's reserved bytes
    models: list[ModelRow]
    pinned: int  # host RAM it page-locked (host/memory/ram.py)
    rss: int | None
    floor: int | None  # device memory no model accounts for (worker/floor.py)
    device_uuid: str | None  # the card it means by its CUDA device


class Candidate(TypedDict):
    """A worker model as the arbiter (``airlock-arbiter``, ADR 0010) decides over it."""

    owner: str
    generation: int
    model: int
    resident: int
    in_use: bool
    last_used: float
    owner_idle: bool
    owner_is_requester: bool
    partial_ok: bool


class AdmitRequest(TypedDict):
    """A worker's ``admit?`` (before a load) or ``oom?`` (its load ran out of memory): upstream's
    own figure for what the load needs on ``device`` and its minimum, and the models it loads."""

    device: str
    need: int
    minimum: int
    models: list[int]


class _Answer(TypedDict):
    topic: str
    need: int
    free_before: int
    steps: list[dict[str, Any]]
    held: int
    free: int
    granted: bool
    hold: int | None


class Admission(_Answer, total=False):
    """The host's answer: ``granted`` with a ``hold`` of ``need`` bytes until the load is done,
    or refused after freeing what could be; ``steps`` are phase one's evictions."""

    candidates: list[Candidate]


class Loaded(TypedDict):
    """A worker's ``loaded``: the admitted loads are done (or failed), their holds go back."""

    holds: list[int]


class WorkerHandle(Protocol):
    """One pack's worker as the memory bridge sees it: a name, whether it runs a call, and the
    commands and readings of its control lane. It never calls back into the host."""

    name: str
    busy: int  # calls in flight (0: idle, its models are evicted first)
    idle_since: float  # monotonic time its last call ended
    holds: list[int]  # admission holds of loads not yet done

    def alive(self) -> bool: ...

    def alive_generation(self, generation: int) -> bool: ...

    def generation(self) -> int | None: ...

    def last_report(self) -> tuple[int | None, Any]:
        """The running generation and the report its liveness timer last read (None, None:
        no process runs; a report of None: none read yet)."""
        ...

    def model_command(
        self, generation: int, model: int, op: str, arg: float, timeout: float = 30.0
    ) -> tuple[int, str | None, Any]: ...

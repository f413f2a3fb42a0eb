"""Type stubs: the dicts ``comfy_airlock._native`` exchanges for the memory protocol and the
eviction arbiter, lanes, workers and the sandbox, each field documented (pydantic-core's style). A stub-only module: these
``TypedDict`` classes exist for type checkers only (import them under ``TYPE_CHECKING``, from
here or from ``comfy_airlock._native``, which re-exports them). In Rust they are typed structs
(``crates/airlock-wire/src/memory.rs``, ``crates/airlock-arbiter``; ADR 0020).
"""

from typing import Literal, TypedDict

# --- the memory protocol (host <-> worker), as Python sees it --------------------------------

class ModelRow(TypedDict):
    """One model a worker holds, as its report lists it."""

    id: int
    """The worker's id for the model, stable for the model's life in that process."""
    name: str
    """A display name (the model's class)."""
    kind: Literal["patcher", "module"]
    """``"patcher"``: a ``ModelPatcher`` in the worker's ``current_loaded_models``;
    ``"module"``: a torch module the pack registered (``comfy_airlock.worker.models``)."""
    device: str
    """The device it loads to, as torch spells it (``"cuda:0"``, ``"cpu"``)."""
    size: int
    """Bytes of the whole model."""
    resident: int
    """Bytes of it on ``device`` now."""
    seq: int
    """Bumped whenever ``size`` or ``resident`` changed (the report's counter)."""
    last_used: float
    """When a node last used it (``time.time()``; ``0.0`` for never)."""
    in_use: bool
    """A node running now uses it: the worker refuses to unload it."""

class WorkerReport(TypedDict):
    """What a worker holds: published by the worker (``WorkerLink.publish``), sent with a
    call's end when it changed (topic ``"telemetry"``), read by the liveness timer
    (``Worker.last_report``) and returned after every ``Worker.model_command``. Exactly these fields: another is refused."""

    pid: int
    """The worker's pid."""
    seq: int
    """Increases with every report: the host ignores one older than what it has."""
    reserved: int
    """``torch.cuda.memory_reserved()``: bytes torch's caching allocator holds (0 without
    CUDA)."""
    models: list[ModelRow]
    """Every model it holds (at most 65,536)."""
    pinned: int
    """Host RAM its ComfyUI has page-locked (upstream's ``TOTAL_PINNED_MEMORY``)."""
    rss: int | None
    """Its resident set in bytes; ``None`` where ``/proc`` cannot say."""
    floor: int | None
    """Device memory no model accounts for (CUDA context, kernels), measured once; ``None``
    before it could be."""
    device_uuid: str | None
    """The card it means by its CUDA device, in NVML's spelling; ``None`` before it has one."""

class LoadRequest(TypedDict):
    """A load a running node is about to make: the payload of the questions ``"admit?"``
    (before the load) and ``"oom?"`` (it ran out of memory; the worker retries once)."""

    device: str
    """The device, as torch spells it (``"cuda:0"``)."""
    need: int
    """Bytes upstream's ``load_models_gpu`` wants free for it."""
    minimum: int
    """The least it can run with (upstream's minimum memory)."""
    models: list[int]
    """The worker's ids of the models being loaded: in use, whatever its last report said."""

class LoadedNotice(TypedDict):
    """The payload of the event ``"loaded"``: the admitted load is done (or failed)."""

    holds: list[int]
    """The admission holds the host can give back now."""

class Admission(TypedDict):
    """The host's answer to ``"admit?"`` / ``"oom?"`` as the worker's ``ask`` returns it. The
    host's ``on_event`` returns a larger record (its candidates and the arbiter's steps too);
    only these fields cross to the worker."""

    granted: bool
    """Whether there is room for the load now."""
    hold: int | None
    """The hold a granted admission keeps on ``need`` bytes until ``"loaded"`` or the call's
    end; ``None`` when not granted."""
    need: int
    """The bytes asked for."""
    free_before: int
    """The device's true free memory before anything was freed."""
    held: int
    """Bytes earlier admissions held when this one was decided."""
    free: int
    """The device's true free memory after the decision."""

ModelCommand = Literal[
    "unload", "partially_unload", "partially_load", "pin_ceiling", "cache_headroom"
]
"""``Worker.model_command``'s ``op``: the first three act on one model (upstream's stand-in
methods), the last two on the worker (host RAM, ``host/ram.py``; the model id is unused)."""

# --- lanes and workers -----------------------------------------------------------------------

Region = tuple[int, int, int, int]
"""``(side, segment, offset, length)``: side 0 is the host's pool, 1 a worker's."""

# --- the host's eviction arbiter (crates/airlock-arbiter; docs/adr/0010-arbiter.md) ----------

class Candidate(TypedDict, total=False):
    """A worker model the arbiter may evict. Other keys are kept: ``evict()`` and each step's
    ``candidate`` get the caller's own dict back."""

    owner: str
    """The pack (required)."""
    generation: int
    """Its worker's generation (required)."""
    model: int
    """The worker's id for the model (required)."""
    resident: int
    """Its bytes on the device (required)."""
    in_use: bool
    """A running node uses it: never evicted (default False)."""
    owner_idle: bool
    """Its worker runs no call (default False)."""
    owner_is_requester: bool
    """It belongs to the worker asking for room (default False)."""
    partial_ok: bool
    """It may be unloaded in part (default False)."""
    last_used: float
    """When it was last used (default 0.0)."""

class Step(TypedDict):
    """One eviction a decision asked for."""

    index: int
    """The candidate's index."""
    candidate: Candidate
    """The caller's dict."""
    owner: str
    """Its pack."""
    generation: int
    """Its worker's generation."""
    model: int
    """Its model id."""
    asked: int
    """Bytes asked of it."""
    freed: int
    """Bytes it freed."""
    refused: str | None
    """Why it refused; None when it freed."""

class Outcome(TypedDict):
    """One decision of ``Arbiter.free_room``."""

    need: int
    """Bytes asked for."""
    held: int
    """Bytes earlier admissions held."""
    steps: list[Step]
    """The evictions, in order."""
    free_before: int
    """True free memory before."""
    free_after: int
    """True free memory after."""
    satisfied: bool
    """Whether ``need`` fits now."""
    freed: int
    """Bytes the steps freed."""
    shortfall: int
    """Bytes still missing."""
    hold: int | None
    """The admission's hold (``hold=True`` and satisfied), else None."""

class ArbiterStats(TypedDict):
    """The arbiter's counters since it was made, and its state now."""

    decisions: int
    """Decisions made (errors excluded)."""
    satisfied: int
    """Decisions that ended with enough free memory."""
    steps: int
    """Evictions asked for, refused ones included."""
    bytes_freed: int
    """Bytes the evictions freed, as their owners measured them."""
    refusals: int
    """Evictions refused."""
    waits: int
    """Requests that found a decision in flight and waited for it."""
    reentries: int
    """Requests refused because their own thread was inside a decision."""
    errors: int
    """Decisions that stopped on an error (free memory could not be read)."""
    in_flight: bool
    """Now: a decision is in flight."""
    waiting: int
    """Now: requests waiting for the turn."""
    holds: int
    """Now: open admission holds."""
    held_bytes: int
    """Now: the bytes they claim."""

# --- lanes, workers, the sandbox ------------------------------------------------------------

class LaneStats(TypedDict):
    """A call lane's pool counters (leak checks, status)."""

    segments: int
    """Segments in our pool."""
    segment_bytes: int
    """Their bytes."""
    leased_regions: int
    """Regions of our pool the peer holds (or that are being encoded)."""
    leased_bytes: int
    """Their bytes."""
    peer_segments: int
    """Segments of the peer's pool we have mapped."""

class BornStats(TypedDict):
    """A worker's outputs born in shared memory (ADR 0044), counted since it started."""

    births: int
    """Blocks leased from the call lane's pool by the allocator."""
    sent: int
    """Outputs sent as a reference to their born block (no copy)."""
    refused: int
    """Births refused (past the budget, or by the pool): those blocks came from the heap."""
    live_blocks: int
    """Born blocks alive now."""
    live_bytes: int
    """Their bytes."""

class Rejections(TypedDict):
    """Peer input this process refused since it started, by reason."""

    frame_too_large: int
    """A frame header announcing more than 64 MiB."""
    truncated: int
    """A stream that ended inside a frame."""
    malformed: int
    """A frame body that does not decode (or breaks a limit)."""
    protocol: int
    """A message the protocol forbids there (or a forged region, segment or descriptor)."""
    bad_token: int
    """A handshake with the wrong token."""
    version_mismatch: int
    """A handshake with another protocol version."""
    wrong_lane: int
    """A lane opened twice."""
    pid_mismatch: int
    """A hello claiming another pid than the connection's."""
    foreign_peer: int
    """A connection from a process we did not start."""
    forked_child: int
    """A connection from a child the worker forked."""

class WorkerInfo(TypedDict):
    """What a worker said about itself at its handshake."""

    pid: int
    """Its pid."""
    generation: int
    """Bumped on every spawn of this ``Worker``."""
    python: str
    """Its Python version."""
    torch: str | None
    """Its torch version, if torch is importable there."""
    numpy: str | None
    """Its numpy version, if numpy is importable there."""

class LaneTiming(TypedDict):
    """What a worker's call lane knows about its waits (ADR 0046). Stamps are
    ``CLOCK_MONOTONIC`` nanoseconds, 0 when never taken (or no shared page)."""

    spin_us: float
    """How long the next read may ask without sleeping (0: never spins)."""
    wake_us: float | None
    """The running average of this lane's wake-ups, from the peer's send to our return; None
    until a read has slept."""
    last_wait_us: float | None
    """How long the worker took to answer the last read: its think time if the read slept;
    None when it timed out."""
    host_got_ns: int
    """When the host last received bytes on the lane."""
    host_sent_ns: int
    """When the host last sent on the lane."""
    worker_got_ns: int
    """When the worker last received bytes on the lane."""
    worker_sent_ns: int
    """When the worker last sent on the lane."""

class SandboxReport(TypedDict):
    """What ``sandbox_apply`` enforced."""

    abi: int
    """The kernel's Landlock ABI."""
    fully_enforced: bool
    """Every filesystem right asked for is enforced (false below ABI 5, where truncation
    and device ``ioctl`` are not controlled)."""
    network_blocked: bool
    """TCP and UDP are blocked."""
    scoped: bool
    """Signals and abstract UNIX sockets are scoped to the sandbox (ABI 6 and later)."""
    skipped: list[str]
    """Paths in the rules that do not exist here."""

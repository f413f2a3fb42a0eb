"""Type stubs for the Rust extension module ``comfy_airlock._native`` (``crates/airlock-py``).

Every dict the module returns or accepts has a ``TypedDict``, each field documented (the style
of pydantic-core's stubs): here, or, for the thin wrappers' public types, in
``comfy_airlock.env`` and ``comfy_airlock.device``, imported below. The dicts exist only at
this edge: in Rust they are typed structs (``crates/airlock-wire/src/memory.rs`` for the
memory protocol, ADR 0020). The ``TypedDict`` classes defined here and the aliases (``Region``, ``ModelCommand``, ``ModelHandler``) exist for
type checkers only; import them under ``TYPE_CHECKING``. Checked against the built module with
``python -m mypy.stubtest comfy_airlock._native`` (its only reports are those typing-only names,
and the defaults of ``Worker``'s ``signal_after``/``kill_after``, which pyo3 shows as ``...``).
"""

import os
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypedDict, final

# The TypedDicts of the thin wrappers, defined (and documented) once, where they are public.
from comfy_airlock.device import (
    Demotions,
    HostRam,
    NvmlDevice,
    NvmlMemory,
    ProcessView,
    WddmParams,
)
from comfy_airlock.env import DiscoveredPack, EnvInfo, PackConfig

PROTOCOL_VERSION: int
"""The wire protocol's version: host and worker must run the same (the handshake checks)."""

# --- exceptions ------------------------------------------------------------------------------

class AirlockError(Exception):
    """The base of every error this module raises."""

class WorkerDied(AirlockError):
    """The worker exited (or was killed) while the host needed it; the next call starts a new
    generation."""

    worker: str
    pid: int
    generation: int
    status: str
    stderr_tail: list[str]

class SpawnError(AirlockError):
    """A worker could not be started (interpreter missing, handshake timed out or failed)."""

class ProtocolError(AirlockError):
    """The peer sent what the protocol forbids; in the host, that worker was ended."""

class HandshakeError(ProtocolError):
    """The handshake failed (worker side: the host refused us or went away)."""

class RemoteError(AirlockError):
    """The worker raised an exception of a type the host cannot re-create."""

class ValueTooLarge(AirlockError):
    """A value breaks the peer's limits (size, depth, items); nothing was sent."""

class CallInterrupted(AirlockError):
    """The call was stopped: ComfyUI's cancel, ``Worker.interrupt()``, or an event handler
    that raised."""

    escalation: str
    """How far the escalation went: ``"flag"``, ``"signal"`` or ``"kill"``."""

class DeadlineExceeded(AirlockError):
    """The call ran past the pack's ``call-deadline``."""

    escalation: str
    """How far the escalation went: ``"flag"``, ``"signal"`` or ``"kill"``."""

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
    call's end when it changed (topic ``"telemetry"``), returned by ``Worker.heartbeat`` and
    after every ``Worker.model_command``. Exactly these fields: another is refused."""

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

@final
class Lane:
    """One call lane's pool and segments, as the tensor codec needs them."""

    @property
    def side(self) -> int:
        """0 in the host, 1 in a worker."""
    @property
    def mappings(self) -> dict[tuple[int, int], Any]:
        """``(side, segment) -> mapping``, owned by the Python codec."""
    def alloc(self, nbytes: int) -> Region:
        """Leases ``nbytes`` of our pool."""
    def write(self, region: Region, src: int, nbytes: int) -> None:
        """Copies ``nbytes`` from address ``src`` (a live, dense tensor or array the caller
        holds) into our leased region, without the GIL."""
    def unalloc(self, side: int, segment: int, offset: int, len: int) -> None:
        """Returns a lease that was never sent."""
    def release(self, side: int, segment: int, offset: int, len: int) -> None:
        """Our last view of a peer region is gone. Safe from finalizers on any thread."""
    def pin_returned(self, side: int, segment: int, offset: int, len: int) -> None:
        """The value being encoded refers back to this peer region: our release of it waits
        until the frame is sent."""
    def hold_own(self, side: int, segment: int, offset: int, len: int) -> None:
        """Sends one of our own regions again: one more hold for the peer."""
    def segment_fd(self, side: int, segment: int) -> tuple[int, int]:
        """A new fd (the caller closes it) for mapping a segment, and its length."""
    def take_unmapped(self) -> list[tuple[int, int]]:
        """Segments retired since the last call, whose mappings should be dropped."""
    def stats(self) -> LaneStats:
        """The pool's counters now."""

def rejections() -> Rejections:
    """Peer input this process refused since it started, by reason."""

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

@final
class Worker:
    """A worker process of the host, started again lazily after it dies. Calls are serialized;
    ``ping``, ``kill`` and ``close`` reach a busy worker."""

    def __new__(
        cls,
        name: str,
        python: str,
        args: Sequence[str],
        env: Sequence[tuple[str, str]],
        cwd: str | None = None,
        connect_timeout: float = 60.0,
        on_event: Callable[[str, Any], Any] | None = None,
        liveness: tuple[float, float] | None = None,
        signal_after: float | None = 5.0,
        kill_after: float | None = 10.0,
    ) -> Worker:
        """Starts the worker. ``env`` is its whole environment. ``on_event(topic, payload)``
        gets the running call's events (a ``"telemetry"`` ``WorkerReport``, a ``"loaded"``
        ``LoadedNotice``, progress, previews) and answers its questions (topics ending in
        ``?``; ``"admit?"`` / ``"oom?"`` get a ``LoadRequest`` and return a dict with at
        least ``Admission``'s fields). ``liveness`` is ``(interval, grace)`` seconds;
        ``signal_after`` / ``kill_after`` are the interrupt escalation's delays (None: leave
        that step out)."""
    def call(
        self,
        target: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None = None,
        interrupted: Callable[[], bool] | None = None,
        deadline: float | None = None,
    ) -> Any:
        """Runs ``target`` (``"module:qualname"``) in the worker and returns its result. The
        call is stopped when ``interrupted()`` returns true, after ``deadline`` seconds, or on
        ``interrupt()``."""
    def interrupt(self) -> None:
        """Asks the running call to stop (any thread; a no-op between calls)."""
    @property
    def pid(self) -> int | None:
        """The current process's pid (a new one after a respawn)."""
    @property
    def generation(self) -> int:
        """Bumped on every spawn."""
    @property
    def name(self) -> str:
        """The worker's name (the pack's)."""
    @property
    def alive(self) -> bool:
        """Whether a process runs now (the next call starts one if not)."""
    @property
    def lane(self) -> Lane | None:
        """The current call lane (for the codec and for leak checks)."""
    def info(self) -> WorkerInfo | None:
        """What the worker reported at its handshake; None when no process runs."""
    def ping(self, timeout: float = 5.0) -> float:
        """Control-lane round trip in seconds; answered even while a call runs."""
    def heartbeat(self, timeout: float = 5.0) -> WorkerReport | None:
        """The worker's latest report, from its control thread; None when no process runs or
        it has published none yet."""
    def model_command(
        self,
        generation: int,
        model: int,
        op: ModelCommand,
        arg: float = 0.0,
        timeout: float = 30.0,
    ) -> tuple[int, str | None, WorkerReport | None]:
        """Runs ``op`` in the worker of ``generation`` (``arg``: bytes, or
        ``partially_load``'s budget). Returns ``(bytes, refusal, report)``: ``refusal`` says
        why nothing was done. A command for a generation that is not running is refused
        without being sent."""
    def kill(self) -> None:
        """SIGKILL the current process and wait (at most 2 s) until it is gone."""
    def close(self, grace: float = 5.0) -> str | None:
        """Asks the worker to exit, waits up to ``grace`` seconds, then kills it. Idempotent;
        returns how it exited."""

ModelHandler = Callable[[int, ModelCommand, float], tuple[int | None, str | None, WorkerReport]]
"""``handler(model, op, arg) -> (bytes_or_None, refusal_or_None, report)``: the worker's side
of ``Worker.model_command`` (``model`` is 0 for ``pin_ceiling`` / ``cache_headroom``)."""

@final
class WorkerLink:
    """The worker's end of its connection to the host."""

    @property
    def generation(self) -> int:
        """The generation the host gave this process."""
    @property
    def name(self) -> str:
        """The worker's name."""
    @property
    def lane(self) -> Lane:
        """The call lane."""
    @property
    def call_id(self) -> int:
        """The id of the call running now; 0 between calls."""
    @property
    def in_call(self) -> bool:
        """Whether a call is running now."""
    def take_interrupt(self) -> bool:
        """True once if the host asked the running call to stop (one atomic load)."""
    def emit(self, topic: str, payload: Any) -> None:
        """Sends an event for the running call without waiting. ``"loaded"`` takes a
        ``LoadedNotice``, ``"telemetry"`` a ``WorkerReport`` (both typed on the wire); other
        topics any value. Raises outside a call."""
    def ask(self, topic: str, payload: Any) -> Any:
        """Asks the host ``topic`` (ends in ``?``) for the running call and waits for the
        answer. ``"admit?"`` / ``"oom?"`` take a ``LoadRequest`` and return an
        ``Admission``; a host that could not answer is raised as ``AirlockError``."""
    def publish(self, report: WorkerReport) -> None:
        """Replaces the report the control thread answers heartbeats with."""
    def set_model_handler(self, handler: ModelHandler) -> None:
        """Installs the handler of the host's commands; it runs on the control thread,
        taking the GIL between the running node's bytecodes."""
    def serve(
        self,
        resolve: Callable[[str], Callable[..., Any]],
        describe: Callable[[BaseException, Any], tuple[str, str, str, tuple[Any, ...], str]],
    ) -> None:
        """Runs calls until the host says stop or goes away (the loop is the supervisor's).
        ``resolve(target)`` returns the callable (once per target); ``describe(exc, tb)``
        returns ``(module, qualname, message, args, traceback)``."""

def forbid_same_user_access() -> None:
    """Makes this worker non-dumpable: siblings of the same user cannot take its descriptors,
    trace it or read its ``/proc`` entries."""

def connect(
    socket: str, token_hex: str, python: str, torch: str | None = None, numpy: str | None = None
) -> WorkerLink:
    """Connects this worker to the host that spawned it (both lanes, the handshake)."""

def install_hooks(
    encode_other: Callable[..., Any],
    decode_tensor: Callable[..., Any],
    decode_ext: Callable[..., Any],
    make_exception: Callable[..., Any],
    log: Callable[..., Any],
) -> None:
    """Installs what only Python can do for the codec (``comfy_airlock.values``): encode
    foreign types, build tensors, re-create exceptions, log. The first installer wins."""

# --- pack configs, environments and the `airlock` command (comfy_airlock.env wraps these) ----

class EnvError(AirlockError):
    """An environment could not be made ready; names the pack and, for uv's errors, the
    requirement and the log."""

    pack: str
    requirement: str | None
    log_path: str | None
    uv_message: list[str] | None

class ConfigError(EnvError):
    """A pack's config is invalid (the message names the file, line and key)."""

class EnvMissing(EnvError):
    """The env is missing or stale and building was not allowed."""

def pickle_denied_modules() -> list[str]:
    """The modules ``pickle = [...]`` may never name."""

def pack_config(pack_dir: str) -> PackConfig:
    """Reads the config of the pack in ``pack_dir`` (``ConfigError`` when invalid)."""

def discover_packs(base_dir: str, extra_roots: list[str] = ...) -> list[DiscoveredPack]:
    """The packs under ``<base_dir>/isolated_nodes/``, ``extra_roots`` and
    ``<base_dir>/custom_nodes/``."""

def ensure_env(
    pack_dir: str,
    *,
    comfyui_dir: str | None = None,
    home: str | None = None,
    uv: str | None = None,
    host_python: str | None = None,
    build: bool = True,
    progress: Callable[[str], None] | None = None,
) -> EnvInfo:
    """Makes sure the pack in ``pack_dir`` has its environment (building it when ``build``;
    else ``EnvMissing``); see ``comfy_airlock.env.ensure_env``."""

def scan_key(
    pack_dir: str, env_key: str, comfyui_dir: str | None = None, runtime_dir: str | None = None
) -> str:
    """The scan cache's key for a pack with the env ``env_key``."""

def cli_main(argv: list[str]) -> int:
    """Runs the ``airlock`` command (``build``, ``doctor``, ``gc``); returns its exit status.
    ``doctor --json`` prints its report; nothing is returned to Python."""

# --- the simulated GPU, the NVML reader and host RAM (comfy_airlock.device wraps these) -------

SIM_GPU_ENV: str
"""``AIRLOCK_SIM_GPU``: the simulated cards' paths, handed to workers and the fake NVML."""
SIM_SEMANTICS_ENV: str
"""``AIRLOCK_SIM_SEMANTICS``: the semantics of new simulated cards."""
NVML_LIBRARY_ENV: str
"""``AIRLOCK_NVML_LIBRARY``: another NVML library than the driver's."""

class DeviceError(AirlockError):
    """An error of a loaded NVML, or of the simulated GPU."""

class SimOutOfMemory(DeviceError):
    """A checked booking did not fit, as a CUDA allocation would fail."""

    pid: int
    tag: str
    requested: int
    free: int

class DeviceMismatch(DeviceError):
    """A worker's device is not the host's (by UUID)."""

    pack: str
    host_uuid: str
    worker_uuid: str

@final
class SimGpu:
    """A simulated card shared by every process that opens its file (tests only: ADR 0006)."""

    @staticmethod
    def create(
        path: str | os.PathLike[str],
        total: int,
        name: str = "sim0",
        uuid: str | None = None,
        semantics: str | None = None,
    ) -> SimGpu:
        """Creates a card of ``total`` bytes at ``path`` (which must not exist); ``semantics``
        is ``"device_wide"``, ``"wddm"`` or ``"wddm:key=value,..."`` (None:
        ``AIRLOCK_SIM_SEMANTICS``, else device-wide)."""
    @staticmethod
    def open(path: str | os.PathLike[str]) -> SimGpu:
        """Opens the card at ``path``."""
    @staticmethod
    def from_env() -> SimGpu | None:
        """Opens the card named by ``AIRLOCK_SIM_GPU``; None when it is unset."""
    @property
    def path(self) -> str:
        """The card's file."""
    @property
    def uuid(self) -> str:
        """Its UUID in NVML's spelling."""
    @property
    def name(self) -> str:
        """Its name, as NVML reports it."""
    @property
    def total(self) -> int:
        """Its memory in bytes."""
    @property
    def semantics(self) -> str:
        """``"device_wide"`` or ``"wddm"``."""
    @property
    def semantics_spec(self) -> str:
        """The semantics with their parameters, as ``create`` reads them back."""
    @property
    def wddm(self) -> WddmParams | None:
        """The WDDM parameters; None on a device-wide card."""
    def used(self) -> int:
        """Bytes booked by every process."""
    def free(self) -> int:
        """``total - used``, never below zero: the truth, what NVML reports."""
    def free_seen_by(self, pid: int) -> int:
        """What ``pid`` reads as free under the card's semantics."""
    def mem_get_info(self, pid: int) -> tuple[int, int]:
        """``(free_seen_by(pid), total)``: ``torch.cuda.mem_get_info`` in ``pid``."""
    def overcommitted(self) -> int:
        """Bytes booked past the total."""
    def attach(self, pid: int) -> bool:
        """``pid`` starts on the card; returns whether it was a start (WDDM)."""
    def repartition(self) -> None:
        """A re-partition event (WDDM)."""
    def repartitions(self) -> int:
        """Re-partition events so far."""
    def demotions(self, pid: int) -> Demotions:
        """What over-admission cost ``pid``."""
    def demotions_total(self) -> Demotions:
        """Demotions summed over every process ever attached."""
    def process_views(self) -> list[ProcessView]:
        """Every process on the card, ascending by pid."""
    def processes_attached(self) -> int:
        """Processes attached (WDDM)."""
    def book(self, pid: int, tag: str, nbytes: int) -> int:
        """Sets the booking of ``(pid, tag)``; returns the previous value."""
    def book_checked(self, pid: int, tag: str, nbytes: int) -> int:
        """``book``, raising ``SimOutOfMemory`` when the growth does not fit."""
    def add(self, pid: int, tag: str, delta: int) -> int:
        """Adds ``delta`` bytes (negative frees); returns the new value."""
    def release(self, pid: int, tag: str) -> int:
        """Drops ``(pid, tag)``; returns the bytes it held."""
    def release_process(self, pid: int) -> int:
        """Drops every booking of ``pid``; returns the bytes released."""
    def reap(self) -> list[int]:
        """Drops the bookings of pids no longer running; returns those pids."""
    def used_by(self, pid: int) -> int:
        """Bytes booked by ``pid``."""
    def bookings(self) -> list[tuple[int, str, int]]:
        """``[(pid, tag, bytes)]``, every booking with bytes."""
    def processes(self) -> list[tuple[int, int]]:
        """``[(pid, bytes)]`` summed over tags: what NVML lists."""
    def slots_in_use(self) -> int:
        """Booking slots not free (a leak shows here)."""

@final
class Nvml:
    """An initialised NVML, kept open for repeated reads."""

    @staticmethod
    def open(library: str | os.PathLike[str] | None = None) -> Nvml | None:
        """NVML from ``library``, ``AIRLOCK_NVML_LIBRARY`` or the driver's; None when it
        cannot be loaded or initialised."""
    @property
    def library(self) -> str:
        """The library as it was asked for."""
    def devices(self) -> list[NvmlDevice]:
        """Every device, in NVML's order."""
    def memory(self, uuid: str) -> NvmlMemory | None:
        """Memory of the device ``uuid`` (NVML's or torch's spelling); None if unknown."""

@final
class DeviceTruth:
    """NVML's reading of one device by UUID, kept open; reads None without a driver."""

    @staticmethod
    def open(uuid: str, library: str | os.PathLike[str] | None = None) -> DeviceTruth:
        """The device ``uuid``; ``DeviceError`` when NVML answers but has no such device."""
    @property
    def uuid(self) -> str:
        """The UUID in NVML's spelling."""
    @property
    def available(self) -> bool:
        """Whether NVML answers."""
    def memory(self) -> NvmlMemory | None:
        """Its memory now, device-wide; None without NVML."""

def nvml_devices(library: str | os.PathLike[str] | None = None) -> list[NvmlDevice] | None:
    """Every NVML device, or None when NVML is unavailable (loads NVML for this one read)."""

def nvml_memory(uuid: str, library: str | os.PathLike[str] | None = None) -> NvmlMemory | None:
    """Memory of the device ``uuid``, or None when NVML is unavailable or has no such device."""

def resolve_device(host_uuid: str, workers: list[tuple[str, str]]) -> str:
    """The UUID the host and every worker ``(pack, uuid)`` share; ``DeviceMismatch`` naming
    the first pack on another card."""

def host_ram() -> HostRam:
    """Host RAM as this process's memory cgroup limits it."""

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

class ArbiterError(AirlockError):
    """A decision could not be made (bad candidates, a failing ``true_free``)."""

@final
class Arbiter:
    """Serializes eviction decisions across the host's threads."""

    def __init__(self) -> None: ...
    def free_room(
        self,
        need: int,
        candidates: Sequence[Candidate],
        true_free: Callable[[], int],
        evict: Callable[[Candidate, int], int | None],
        *,
        hold: bool = False,
    ) -> Outcome:
        """One decision, after waiting (GIL released) for any other in flight.
        ``evict(c, want)`` unloads ``want`` bytes of ``c`` (all of it when ``want ==
        c["resident"]``) and returns the bytes freed, or None / raises for a refusal.
        ``hold=True`` (an admission) keeps ``need`` bytes claimed until ``release``."""
    def release(self, hold: int) -> int | None:
        """Gives back an admission's hold; its bytes, or None if released already."""
    @staticmethod
    def plan(need: int, free: int, candidates: Sequence[Candidate]) -> list[int]:
        """Indices a decision would evict, in order (the policy alone; nothing is called)."""
    def stats(self) -> ArbiterStats:
        """Counters and state."""

# --- the worker's optional Landlock sandbox (comfy_airlock.sandbox wraps these) --------------

class SandboxError(AirlockError):
    """The sandbox cannot be enforced here, or applying it failed."""

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

def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 without Landlock."""

def sandbox_check(network: bool) -> int:
    """``SandboxError`` unless a sandbox (without network when ``network`` is false) can be
    enforced here; returns the ABI."""

def sandbox_apply(
    read: list[str], list: list[str], write: list[str], network: bool
) -> SandboxReport:
    """Restricts this process, for good, to the system paths plus ``read`` and ``write``
    (listing the directories in ``list``), without TCP and UDP unless ``network``. Call it
    while the process has one thread."""

"""Type stubs for the Rust extension module ``comfy_airlock._native`` (``crates/airlock-py``).

Every dict the module returns or accepts has a ``TypedDict``, each field documented (the style
of pydantic-core's stubs), in ``_native_shapes.pyi`` or, for the thin wrappers' public types,
in ``comfy_airlock.env`` and ``comfy_airlock.device``, imported below. The dicts exist only at
this edge: in Rust they are typed structs (ADR 0020). Those classes and the aliases
(``Region``, ``ModelCommand``, ``ModelHandler``) exist for type checkers only; import them
under ``TYPE_CHECKING``. Checked against the built module with
``python -m mypy.stubtest comfy_airlock._native`` (its only reports are those typing-only names,
and the defaults of ``Worker``'s ``signal_after``/``kill_after``, which pyo3 shows as ``...``).
"""

from collections.abc import Callable, Sequence
from typing import Any, Literal, final

# The simulated GPU, the NVML reader and host RAM (comfy_airlock.device wraps these).
from comfy_airlock._native_device import NVML_LIBRARY_ENV as NVML_LIBRARY_ENV
from comfy_airlock._native_device import SIM_GPU_ENV as SIM_GPU_ENV
from comfy_airlock._native_device import SIM_SEMANTICS_ENV as SIM_SEMANTICS_ENV
from comfy_airlock._native_device import DeviceError as DeviceError
from comfy_airlock._native_device import DeviceMismatch as DeviceMismatch
from comfy_airlock._native_device import DeviceTruth as DeviceTruth
from comfy_airlock._native_device import Nvml as Nvml
from comfy_airlock._native_device import SimGpu as SimGpu
from comfy_airlock._native_device import SimOutOfMemory as SimOutOfMemory
from comfy_airlock._native_device import host_ram as host_ram
from comfy_airlock._native_device import nvml_devices as nvml_devices
from comfy_airlock._native_device import nvml_memory as nvml_memory
from comfy_airlock._native_device import resolve_device as resolve_device

# Every other TypedDict, and the aliases Region and ModelCommand.
from comfy_airlock._native_shapes import Admission as Admission
from comfy_airlock._native_shapes import ArbiterStats as ArbiterStats
from comfy_airlock._native_shapes import BornStats as BornStats
from comfy_airlock._native_shapes import Candidate as Candidate
from comfy_airlock._native_shapes import LaneStats as LaneStats
from comfy_airlock._native_shapes import LaneTiming as LaneTiming
from comfy_airlock._native_shapes import LoadedNotice as LoadedNotice
from comfy_airlock._native_shapes import LoadRequest as LoadRequest
from comfy_airlock._native_shapes import ModelCommand as ModelCommand
from comfy_airlock._native_shapes import ModelRow as ModelRow
from comfy_airlock._native_shapes import Outcome as Outcome
from comfy_airlock._native_shapes import Region as Region
from comfy_airlock._native_shapes import Rejections as Rejections
from comfy_airlock._native_shapes import SandboxReport as SandboxReport
from comfy_airlock._native_shapes import Step as Step
from comfy_airlock._native_shapes import WorkerInfo as WorkerInfo
from comfy_airlock._native_shapes import WorkerReport as WorkerReport

# The TypedDicts of the thin wrappers, defined (and documented) once, where they are public.
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

@final
class Lane:
    """One call lane's pool and segments, as the tensor codec needs them."""

    @property
    def side(self) -> int:
        """0 in the host, 1 in a worker."""
    @property
    def mappings(self) -> dict[tuple[int, int], Any]:
        """``(side, segment) -> mapping``, owned by the Python codec."""
    def alloc(self, nbytes: int, frozen: bool = False) -> Region:
        """Leases ``nbytes`` of our pool; ``frozen``: in a segment that only our pool writes,
        for a copy we keep (ADR 0027)."""
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
    def releaser(self) -> Callable[[int, int, int, int], None]:
        """``release`` as a callable that holds the lane's core but not this object (no
        cycle through bookkeeping the lane holds)."""
    def trim(self) -> int:
        """Retires our idle segments and frees their memory now; returns the bytes given
        back. Safe from any thread."""
    def stats(self) -> LaneStats:
        """The pool's counters now."""
    def born(self, addr: int, nbytes: int) -> Region | None:
        """The region of a block this worker's node wrote straight into our pool (a birth, ADR
        0044) that starts at ``addr`` and holds ``nbytes``, with one more hold for the peer;
        None for any other address (the caller copies it)."""

def rejections() -> Rejections:
    """Peer input this process refused since it started, by reason."""

@final
class WriteWatch:
    """Watches a span of this process's private memory for writes by any route (kept
    copies, ADR 0027)."""

    @staticmethod
    def start(addr: int, nbytes: int) -> WriteWatch | None:
        """A watch of that memory, or None when it cannot be watched (not private anonymous
        memory, or a kernel without userfaultfd's async write-protection and
        ``PAGEMAP_SCAN``). Private to the codec."""
    def unchanged(self) -> bool:
        """True when nothing wrote the memory since the watch started or last answered
        False."""

def private_pages(addr: int, nbytes: int) -> list[tuple[int, int]] | None:
    """``[(start, end), ...]``: the pages of the span, in a private mapping of a shared
    segment, that this process wrote; None when the kernel cannot say."""

def watch_private(addr: int, nbytes: int) -> bool:
    """Write-protects our private mapping of a frozen segment (or pages of it dropped since),
    so that :func:`private_pages` asks the kernel for written pages alone; False when the
    kernel cannot (then it walks every page)."""

def private_watched(addr: int, nbytes: int) -> bool:
    """Whether :func:`watch_private` armed all of the span (so :func:`private_pages` asks
    the kernel for written pages alone)."""

def write_watch_supported() -> bool:
    """Whether write watches work here at all."""

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
        liveness: tuple[float, float | None] | None = None,
        signal_after: float | None = 5.0,
        kill_after: float | None = 10.0,
    ) -> Worker:
        """Starts the worker. ``env`` is its whole environment. ``on_event(topic, payload)``
        gets the running call's events (a ``"telemetry"`` ``WorkerReport``, a ``"loaded"``
        ``LoadedNotice``, progress, previews) and answers its questions (topics ending in
        ``?``; ``"admit?"`` / ``"oom?"`` get a ``LoadRequest`` and return a dict with at
        least ``Admission``'s fields). ``liveness`` is ``(interval, grace)`` seconds: the
        report is read every ``interval``, the worker killed as hung after ``grace`` silent
        (None: never);
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
    def route_call(
        self, target: str, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None
    ) -> Any:
        """Runs ``target`` on the worker's route lane: beside a call that runs, one route call
        at a time, never interrupted, without a deadline (ADR 0055)."""
    def interrupt(self) -> None:
        """Asks the running call to stop (any thread; a no-op between calls)."""
    def idle_seconds(self) -> float | None:
        """Seconds since the last call ended (since the start, before the first); None while
        one runs or waits to. Route calls do not count."""
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
    def lane_timing(self) -> LaneTiming | None:
        """What the call lane knows about its waits; None when no process runs."""
    def last_report(self) -> WorkerReport | None:
        """The worker's latest report as the liveness timer last read it from its control
        thread; None when no process runs, liveness is off, or none was read yet. Sends
        nothing."""
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
        """This link's call lane."""
    @property
    def route(self) -> WorkerLink | None:
        """The route lane's link, whose calls (the pack's HTTP requests) a thread of their own
        serves while a node runs on this one (ADR 0055); None on the route lane's link."""
    @property
    def call_id(self) -> int:
        """The id of the call running now; 0 between calls."""
    @property
    def in_call(self) -> bool:
        """Whether a call is running now."""
    def idle_seconds(self) -> float | None:
        """Seconds since the last call ended (or since the connection, before the first);
        None while a call runs."""
    def take_interrupt(self) -> bool:
        """True once if the host asked the running call to stop (one atomic load)."""
    def emit(self, topic: str, payload: Any) -> None:
        """Sends an event for the running call without waiting. ``"loaded"`` takes a
        ``LoadedNotice``, ``"telemetry"`` a ``WorkerReport`` (both typed on the wire); other
        topics any value. Raises outside a call."""
    def post(self, topic: str, payload: Any) -> None:
        """Sends a UI message (``"send_sync"``, ``"progress_text"``) on the events lane, which a
        host thread reads while no call runs (ADR 0056); raises on the route lane's link."""
    def ask(self, topic: str, payload: Any) -> Any:
        """Asks the host ``topic`` (ends in ``?``) for the running call and waits for the
        answer. ``"admit?"`` / ``"oom?"`` take a ``LoadRequest`` and return an
        ``Admission``; a host that could not answer is raised as ``AirlockError``."""
    def enable_births(self, min_bytes: int, budget: int) -> bool:
        """Lets the nodes' outputs be born in the call lane's pool (ADR 0044): blocks of at
        least ``min_bytes``, up to ``budget`` live bytes. False if ``libairlock_born.so`` is not
        preloaded."""
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

def born_stats() -> BornStats | None:
    """This worker's births so far (ADR 0044); None when they are off."""

def born_numpy(api: Any) -> Literal["installed", "foreign", "unsupported", "off"]:
    """Lets this worker's numpy arrays be born too (ADR 0045), given numpy's ``_ARRAY_API``
    capsule: ``"installed"`` (now, or already), ``"foreign"`` (a data allocator of the pack's
    own is set: left alone), ``"unsupported"`` (numpy before 1.22), ``"off"`` (births off)."""

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

# --- the host's eviction arbiter (crates/airlock-arbiter; docs/adr/0010-arbiter.md) ----------

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

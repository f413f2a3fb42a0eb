"""One isolated pack as the host sees it: its environment, its (lazily started) worker and the
calls its proxies forward. It is the worker handle the memory bridge works through
(``memory/shapes.py``: ``WorkerHandle``); what its worker sends during a call goes to
``events.py``."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from comfy_airlock import env as airlock_env
from comfy_airlock import sandbox, settings, undeclared
from comfy_airlock._native import CallInterrupted
from comfy_airlock.host import comfy_state, events
from comfy_airlock.host.memory import admission, heartbeat
from comfy_airlock.host.memory.ledger import LEDGER
from comfy_airlock.host.memory.ram import RAM
from comfy_airlock.host.prompt_context import Outbound
from comfy_airlock.host.timing import Timing
from comfy_airlock.supervisor import Worker
from comfy_airlock.worker_env import worker_env

log = logging.getLogger("comfy_airlock")

PRELOAD = "comfy_airlock.worker.comfy"
# Imports the pack: in a worker started ahead of its first node (host/prestart.py), and before
# a bounded call to a worker that has not (ADR 0047).
WARM = "comfy_airlock.worker.comfy:warm"
SCAN = "comfy_airlock.worker.comfy:scan"
# The calls that import the pack in the worker (besides a node's): one that returned tells the
# pack its worker generation has imported it.
_IMPORTING = frozenset((WARM, SCAN))
# Node methods run inside ComfyUI's context for the node (ADR 0022).
NODE_TARGET = "comfy_airlock.worker.prompt_context:run"


@dataclass
class PackStats:
    calls: int = 0
    errors: int = 0
    busy_s: float = 0.0
    last_error: str | None = None
    # The worker's traceback of that error, when it raised in the worker (the panel shows it).
    last_traceback: str | None = None
    # When the last node call began here (wall clock), before any wait for the worker.
    last_node_at: float | None = None


@dataclass
class IsolatedPack:
    """A pack whose nodes run in ``python`` (its environment's interpreter)."""

    name: str
    dir: str
    python: str
    env_dir: str
    env_key: str
    entry: str | None = None
    # A group's packs (airlock.toml `packs`, ADR 0054): subfolders its worker imports in order.
    members: tuple[str, ...] = ()
    # Seconds a node call may run before it is stopped (airlock.toml `call-deadline`).
    call_deadline: float | None = None
    env_vars: dict[str, str] = field(default_factory=dict)
    # airlock.toml `[sandbox]` (enabled, network, read, write) and `pickle` (type names).
    sandbox: dict[str, Any] = field(default_factory=dict)
    pickle: tuple[str, ...] = ()
    # ComfyUI's tree when the host is not ComfyUI itself (`airlock isolate` scans the pack).
    comfyui_dir: str | None = None
    # Whether its env has ComfyUI's requirements (the worker then loads ComfyUI's nodes).
    comfy: bool = True
    # airlock.toml `prestart`: its worker starts with ComfyUI (host/prestart.py).
    prestart: bool = False
    # airlock.toml `comfy-nodes`: ComfyUI's own nodes imported before the pack (ADR 0060).
    comfy_nodes: bool = True
    stats: PackStats = field(default_factory=PackStats)
    # Calls in flight: a worker with none is idle (its models are evicted first).
    busy: int = 0
    # Node calls among them: a route request waits for them (host/routes.py says so).
    # When the last call ended (monotonic): idle workers release their models after a while.
    idle_since: float = field(default_factory=time.monotonic)
    # Admission holds of loads not yet done (memory/admission.py), given back when the worker
    # says the load is done, or when no call is in flight any more.
    holds: list[int] = field(default_factory=list)
    _worker: Worker | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # The worker generation known to have imported the pack (a node, warm or scan call to it
    # returned): see ``imported``.
    _imported: int | None = None

    @classmethod
    def from_env(
        cls, name: str, pack_dir: str, info: Mapping[str, Any], comfyui_dir: str | None = None
    ) -> IsolatedPack:
        """The pack whose environment ``env.ensure_env`` returned as ``info``."""
        env_vars = dict(info.get("env_vars") or {})
        if info.get("conda"):
            # What activating a conda prefix does: its programs first on PATH (ffmpeg, ...).
            env_vars.setdefault("CONDA_PREFIX", info["env_dir"])
            path = env_vars.get("PATH") or os.environ.get("PATH", "")
            env_vars["PATH"] = os.pathsep.join(p for p in (f"{info['env_dir']}/bin", path) if p)
        return cls(
            name=name,
            dir=pack_dir,
            python=info["python"],
            env_dir=info["env_dir"],
            env_key=info["key"],
            entry=info.get("entry"),
            members=tuple(info.get("members") or ()),
            env_vars=env_vars,
            call_deadline=info.get("call_deadline"),
            sandbox=dict(info.get("sandbox") or {}),
            pickle=tuple(info.get("pickle") or ()),
            comfy=bool(info.get("comfy", True)),
            prestart=bool(info.get("prestart", False)),
            comfy_nodes=bool(info.get("comfy_nodes", True)),
            comfyui_dir=comfyui_dir,
        )

    # --- the worker ----------------------------------------------------------------------

    def _spawn(self) -> Worker:
        comfyui = comfy_state.comfyui_dir() or self.comfyui_dir
        folders = comfy_state.folder_paths_snapshot()
        comfy = {
            "comfyui_dir": comfyui,
            "pack_dir": self.dir,
            "pack_name": self.name,
            "entry": self.entry,
            "members": list(self.members),
            "folder_paths": folders,
            "comfy_requirements": self.comfy,
            "comfy_nodes": self.comfy_nodes,
            **comfy_state.host_identity(comfyui),
        }
        ours = {settings.ENV["comfy"]: json.dumps(comfy), settings.ENV["worker"]: "1"}
        # Not the host's environment (its API keys): an allow-list, the pack's [env_vars], ours.
        env = worker_env(self.env_vars, ours)
        env.pop(sandbox.ENV, None)  # only ever the rules made here
        rules = self.sandbox_rules(comfyui, folders)
        if rules is not None:
            env[sandbox.ENV] = rules
        timing = Timing.from_env()
        return Worker(
            self.python,
            preload=[PRELOAD],
            env=env,
            name=self.name,
            cwd=os.getcwd(),
            on_event=self._on_event,
            liveness=timing.liveness,
            signal_after=timing.signal_after,
            kill_after=timing.kill_after,
            pickle=self.pickle,
        )

    def sandbox_rules(
        self, comfyui: str | None = None, folders: dict[str, Any] | None = None
    ) -> str | None:
        """The worker's sandbox rules (None when off); raises ``SandboxError`` naming the pack
        when this kernel cannot enforce them."""
        return sandbox.host_rules(
            self.name,
            self.sandbox,
            pack_dir=self.dir,
            env_dir=self.env_dir,
            comfyui_dir=comfyui,
            folder_paths=folders,
        )

    def worker(self) -> Worker:
        """The pack's worker, started on first use (and by the core again after a death)."""
        with self._lock:
            if self._worker is None:
                self._worker = self._spawn()
            return self._worker

    def start_ahead(self) -> bool:
        """Starts the worker and its import of the pack on a thread of its own, and returns at
        once; False when a worker runs or is being started. The start is claimed here, so a
        node call made after this returns waits for this worker instead of starting one."""
        if self.alive() or not self._lock.acquire(blocking=False):
            return False
        threading.Thread(
            target=self._start_ahead, name=f"airlock-start-{self.name}", daemon=True
        ).start()
        return True

    def _start_ahead(self) -> None:
        t0 = time.monotonic()
        try:
            try:
                if self._worker is None:
                    self._worker = self._spawn()
            finally:
                self._lock.release()
            self.call(WARM)  # a worker that had died is started again by this call
        except Exception as e:
            log.warning(
                "[comfy-airlock] pack %r: its worker could not be started ahead (%s: %s); "
                "its first node starts it",
                self.name,
                type(e).__name__,
                str(e).splitlines()[0] if str(e) else "",
            )
            return
        log.info(
            "[comfy-airlock] pack %r: worker started ahead of its nodes in %.1f s",
            self.name,
            time.monotonic() - t0,
        )

    def ask(self, target: str, *args: Any) -> Any:
        """A question of the host's own (not a node's) to the running worker, counted in no
        statistics; raises when none runs (none is started for it)."""
        w = self._worker
        if w is None or not w.alive:
            raise RuntimeError(f"pack {self.name!r} has no running worker")
        return w.call(target, *args)

    def close(self, grace: float = 5.0) -> None:
        """Stops the worker: asked to exit, killed after ``grace`` seconds (0: at once)."""
        with self._lock:
            w, self._worker = self._worker, None
        if w is not None:
            w.close(grace)
        LEDGER.drop_pack(self.name)

    # --- calls ---------------------------------------------------------------------------

    def call(self, target: str, *args: Any, node: bool = False) -> Any:
        """Runs ``target`` in the worker. A ``node`` call (a node method inside a prompt) is
        stopped by ComfyUI's cancel and by the pack's call deadline."""
        t0 = time.perf_counter()
        self.stats.calls += 1
        heartbeat.sync()
        RAM.push_headroom(self)
        self.busy += 1
        try:
            w = self.worker()
            if not node:
                result = w.call(target, *args)
            else:
                if self.call_deadline is not None:
                    self._import_first(w)
                result = w.run(
                    target,
                    args,
                    interrupted=_host_interrupted(),
                    deadline=self.call_deadline,
                )
            if node or target in _IMPORTING:
                self._imported = w.generation
            mismatch = LEDGER.mismatched.get(self.name)
            if mismatch is not None:
                raise mismatch  # its report said so during the call: nothing it holds is booked
            return result
        except BaseException as e:
            self._failed(e)
            raise
        finally:
            self.busy -= 1
            self.idle_since = time.monotonic()
            if self.busy == 0 and self.holds:
                admission.release(self)
            self.stats.busy_s += time.perf_counter() - t0

    def route(self, target: str, *args: Any) -> Any:
        """Runs ``target`` on the worker's route lane (ADR 0055): an HTTP request to the pack,
        answered while one of its nodes runs. Counted as a call (and its error as one), not
        as work that makes the worker busy: a handler is not a node and holds no model."""
        self.stats.calls += 1
        try:
            return self.worker().route_call(target, *args)
        except BaseException as e:
            self._failed(e)
            raise

    def _failed(self, e: BaseException) -> None:
        """A call's or a route call's error: counted and kept for the status; a worker that
        died with it holds nothing any more."""
        _park_if_exiting()
        self.stats.errors += 1
        self.stats.last_error = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        self.stats.last_traceback = getattr(e, "remote_traceback", None)
        if not self.alive():
            LEDGER.drop_pack(self.name)

    def imported(self) -> bool:
        """Whether a worker runs and has imported the pack (a node, ``warm`` or ``scan`` call
        to its generation returned). A bounded call (a node's ``call-deadline``, a route's
        bound) to a pack that has not waits for the import apart (ADR 0047)."""
        w = self._worker
        return w is not None and self._imported_by(w)

    def _imported_by(self, w: Worker) -> bool:
        return w.alive and w.generation == self._imported

    def _import_first(self, w: Worker) -> None:
        """A node's ``call-deadline`` is the node's: a worker that has not imported the pack
        yet (just started, or started again after a death) imports it first, stoppable by
        ComfyUI's cancel but on no deadline. Else a pack whose import outlasts its deadline
        would fail its first node in every new worker, and the deadline kill would start
        another one to fail the same way (ADR 0047)."""
        if self._imported_by(w):
            return
        w.run(WARM, (), interrupted=_host_interrupted())
        self._imported = w.generation

    def _on_event(self, topic: str, payload: Any) -> Any:
        return events.route(self, topic, payload)

    # --- memory ----------------------------------------------------------------------------

    def alive(self) -> bool:
        w = self._worker
        return w is not None and w.alive

    def alive_generation(self, generation: int) -> bool:
        w = self._worker
        return w is not None and w.alive and w.generation == generation

    def model_command(
        self, generation: int, model: int, op: str, arg: float, timeout: float = 30.0
    ) -> tuple[int, str | None, Any]:
        w = self._worker
        if w is None:
            return 0, "no worker", None
        return w.model_command(generation, model, op, arg, timeout)

    def generation(self) -> int | None:
        """The running worker's generation (None: no process running)."""
        w = self._worker
        return w.generation if w is not None and w.alive else None

    def last_report(self) -> tuple[int | None, Any]:
        w = self._worker
        if w is None or not w.alive:
            return None, None
        generation = w.generation
        return generation, w.last_report()

    def scan(self) -> dict[str, Any]:
        return self.call(SCAN)

    def run(self, node_id: str, key: str, method: str, inputs: Outbound) -> Any:
        """Runs a node method in the worker; ``inputs``: host/prompt_context.py's."""
        self.stats.last_node_at = time.time()
        kwargs, context = inputs
        try:
            return self.call(NODE_TARGET, node_id, key, method, kwargs, context, node=True)
        except CallInterrupted as e:
            if getattr(e, "escalation", "flag") != "flag":
                log.warning("[comfy-airlock] pack %r, node %r: %s", self.name, node_id, e)
            # ComfyUI reports its own exception as an interrupted prompt, not as a failure.
            mm = sys.modules.get("comfy.model_management")
            exc = getattr(mm, "InterruptProcessingException", None)
            if exc is None:
                raise
            raise exc(str(e)) from e
        except Exception as e:
            _with_worker_traceback(e, self.name, node_id, self.dir)
            raise

    # --- status --------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The worker's row; ``models`` are the stand-ins of its models in the host's ledger."""
        w = self._worker
        info = w.info() if w is not None else None
        pid = w.pid if w is not None else None
        return {
            "pack": self.name,
            # A group's packs (ADR 0054), in import order; empty for one pack.
            "members": list(self.members),
            "state": "running" if (w is not None and w.alive) else "idle",
            "pid": pid,
            "generation": w.generation if w is not None else 0,
            # When its process started, and when the last node call began (wall clock).
            "started_at": _started_at(pid),
            "last_node_at": self.stats.last_node_at,
            "python": (info or {}).get("python"),
            "torch": (info or {}).get("torch"),
            "numpy": (info or {}).get("numpy"),
            "rss_mib": _rss_mib(pid),
            # Host RAM it page-locked (its report) and its ceiling (memory/ram.py).
            "pinned": (LEDGER.last_report(self.name) or {}).get("pinned"),
            "pin_ceiling": RAM.ceiling(self.name),
            # Its worker is on another card than the host (None: the same, or not known yet).
            "device_mismatch": _text(LEDGER.mismatched.get(self.name)),
            "calls": self.stats.calls,
            "errors": self.stats.errors,
            "busy_s": round(self.stats.busy_s, 3),
            "last_error": self.stats.last_error,
            "last_traceback": self.stats.last_traceback,
            "env": self.env_dir,
            "models": [r for r in LEDGER.rows() if r["pack"] == self.name],
        }


# Set by the exit handler (host/loader.py) before it stops the workers.
EXITING = threading.Event()


def _park_if_exiting() -> None:
    """ComfyUI is exiting and its exit handler stopped this call's worker. Natively the node
    would still be running when the process ends, and nothing would follow it; returning would
    run ComfyUI's error path and then its prompt worker's ``gc.collect()``, a second or more of
    CPU holding the GIL, which the exit handler (and the exit) would wait for. So the call never
    returns: its thread (ComfyUI's daemon prompt worker, or one of ours) ends with the process.
    Non-daemon threads were joined before exit handlers run, so none is kept waiting on it."""
    if EXITING.is_set():
        threading.Event().wait()


def _host_interrupted() -> Any:
    """The host's own cancel flag (set by ``POST /interrupt``), read without clearing it."""
    mm = sys.modules.get("comfy.model_management")
    return getattr(mm, "processing_interrupted", None)


def _started_at(pid: int | None) -> float | None:
    """When process ``pid`` started (wall clock, to the kernel's tick), from /proc."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def _with_worker_traceback(e: BaseException, pack: str, node_id: str, pack_dir: str) -> None:
    """ComfyUI shows ``str(exc)`` and the host's frames only; the worker's traceback is what
    explains the failure, so it joins the message (the type is unchanged). A module the node
    imports without the pack declaring it gets what to add, and where (ADRs 0049, 0050)."""
    tb = getattr(e, "remote_traceback", None)
    if not tb or len(e.args) > 1 or getattr(e, "_airlock_annotated", False):
        return
    # A KeyError shows the repr of its argument: the text is given a repr that is itself, so
    # the traceback reads as lines, after the key quoted as natively.
    head = (repr if isinstance(e, KeyError) else str)(e.args[0]) if e.args else ""
    hint = undeclared.hint_of(e, airlock_env.config_file(pack_dir))
    if hint:
        head += f"\n{hint}"
    text = f"{head}\n\n[comfy-airlock] {node_id!r} raised in the worker of pack {pack!r}:\n{tb}"
    e.args = (_AsIs(text) if isinstance(e, KeyError) else text,)
    if isinstance(e, ImportError):
        e.msg = text  # an ImportError's str() is its msg, not its args
    e._airlock_annotated = True  # type: ignore[attr-defined]


class _AsIs(str):
    def __repr__(self) -> str:
        return str(self)


def _text(e: BaseException | None) -> str | None:
    return None if e is None else str(e)

"""One arbiter under load: four workers and the host loading and evicting on one simulated card
at the same time, for a bounded time, with workers killed mid-run (issue 5, "one arbiter").

Run as ``python stress_scenario.py SEMANTICS [--seconds N] [--seed S] [--grace G]`` (one
fresh process: upstream's ledger is module state); prints one JSON object (``RESULT {...}``)
whose ``problems`` list is empty when every check held. ``--grace``: how long past the end a
thread may take before it counts as stuck (default 180 s). tests/comfyui/test_stress.py runs it on both
semantics; the figures are in docs/memory.md ("Stress").

The concurrency is the one ComfyUI really has, no more and no less:

- **One execution thread** runs every node, in the order queued (ComfyUI runs prompts on one
  thread, and comfy-airlock's proxies call their worker synchronously on it). The host's own
  loads (upstream ``load_models_gpu``), its evictions (upstream ``free_memory``) and every
  worker call are jobs on it, so upstream's ``current_loaded_models`` is changed there only:
  by upstream, by the bridge at call boundaries, and by the admissions a worker asks for
  while its call runs (answered on the calling thread).
- **Actors** (the host and four workers) each choose their next node on their own thread
  (seeded) and queue it, as prompts mixing nodes of several packs would: which runs next is
  the queue's order, not a script's.
- **Concurrently with that thread**: the bridge's heartbeat (reports on control lanes, idle
  release on a timer and under pressure through the same arbiter as admissions, the reserve);
  each worker's control thread executing evictions while its main thread runs a node; a
  status reader (the ``/airlock/status`` route, on the server thread); a chaos thread that
  kills one worker per 30 s of run (at least one, evenly spaced) with SIGKILL, in turn one
  mid-call (holding memory on the card) and one idle holding models in upstream's ledger, each
  waited for until the next kill is due (a slow machine reaches these moments later, not
  never), and frees its memory on the card as the driver does when a process dies. The worker's next node starts it again (the core respawns it).

The checks (each failure is a line in ``problems``): every thread finishes (else all stacks are
dumped with faulthandler and the run fails as stuck); every admission gets an answer; no node
fails except in a worker the chaos thread killed, and no worker dies otherwise; nothing past the
card and no demotion (device-wide: also every granted load whole); upstream's list is changed
never off the execution thread (not even an append: ADR 0030); after every worker node,
each model the worker holds has exactly one entry in upstream's list; and at the end, after a
last report from each live worker and a sync, no model is lost: every model a worker holds is
in its own ledger and has exactly one stand-in in upstream's list with its bytes, no stand-in
of a dead generation remains, the ledger's bytes per process equal the card's bookings, the
arbiter is at rest (no turn, waiter or hold left), and no worker process outlives the run.
"""

from __future__ import annotations

import collections
import faulthandler
import json
import os
import queue
import random
import signal
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

from scenario_host import CUDA, GIB, MIB, call, close_all, mm
from wddm_scenarios import HOST, HostModel, host_load, start, worker

from comfy_airlock import settings
from comfy_airlock.host import loader
from comfy_airlock.host.memory import admission, heartbeat, idle
from comfy_airlock.host.memory.ledger import LEDGER
from comfy_airlock.host.memory.standin import StandIn

WORKERS = ("W1", "W2", "W3", "W4")
SIZES = [1, 2, 3, 4]  # GiB, in parts of 512 MiB
PART = GIB // 2
MAX_MODELS = 3  # per actor
HEARTBEAT_S = 0.05  # the heartbeat, often, so that it meets the admissions:
IDLE_RELEASE_S = 2.0  # idle workers' models leave the card on a timer...
PRESSURE_FREE = 3 * GIB  # ...and under pressure, through the arbiter
GRACE_S = 180.0  # past the run's end, for the last nodes (a respawn imports ComfyUI)
EXEC_NAME = "comfyui-execution"
RESPAWNED = object()  # a node not run: its worker had died and was started again


class Execution:
    """ComfyUI's execution thread: one node at a time, in the order queued."""

    def __init__(self) -> None:
        self._queue: queue.Queue = queue.Queue()
        self.inflight: str | None = None  # the actor whose node runs now
        self.nodes = 0
        self.thread = threading.Thread(target=self._run, name=EXEC_NAME, daemon=True)
        self.thread.start()

    def run(self, actor: str, fn, *args):
        done, box = threading.Event(), {}
        self._queue.put((actor, fn, args, done, box))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box["value"]

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            actor, fn, args, done, box = item
            self.inflight = actor
            try:
                box["value"] = fn(*args)
            except BaseException as e:
                box["error"] = e
            finally:
                self.inflight = None
                self.nodes += 1
                done.set()

    def stop(self) -> None:
        self._queue.put(None)
        self.thread.join()


ALLOWED = {"MainThread", EXEC_NAME}  # the threads that may change upstream's list
STRAY: list[str] = []  # changes made by any other


class GuardedList(list):
    """Upstream's ``current_loaded_models``, recording changes made off the execution thread
    (test instrumentation: upstream's code finds it by the module global, as it finds the
    list itself)."""

    def _note(self, op: str) -> None:
        name = threading.current_thread().name
        if name not in ALLOWED:
            STRAY.append(f"{op} on {name}")

    def insert(self, i, x):
        self._note("insert")
        super().insert(i, x)

    def append(self, x):
        self._note("append")
        super().append(x)

    def pop(self, i=-1):
        self._note("pop")
        return super().pop(i)

    def remove(self, x):
        self._note("remove")
        super().remove(x)

    def __setitem__(self, i, x):
        self._note("setitem")
        super().__setitem__(i, x)

    def __delitem__(self, i):
        self._note("delitem")
        super().__delitem__(i)

    def clear(self):
        self._note("clear")
        super().clear()


KILLS: dict[str, int] = {}  # worker -> kills so far (set before the signal)
STATS: dict = {
    "admissions": {"answered": 0, "granted": 0, "refused": 0, "errors": 0, "threads": {}},
    "commands": {},  # "thread/op" -> [count, bytes freed or loaded, refusals, errors]
    "refusals": {},  # "thread/op" -> {the worker's reason: count}
    "idle": {"passes": 0, "idle": 0, "pressure": 0},
    "status_reads": 0,
    "status_errors": [],
}
_STATS_LOCK = threading.Lock()


def _thread_kind() -> str:
    name = threading.current_thread().name
    return {EXEC_NAME: "exec", "airlock-heartbeat": "heartbeat"}.get(name, name)


def instrument_admission() -> None:
    """Counts the host's answers (the memory events look ``admission.answer`` up per call)."""
    answer = admission.answer

    def counted(handle, topic, request):
        a = STATS["admissions"]
        try:
            r = answer(handle, topic, request)
        except BaseException:
            with _STATS_LOCK:
                a["errors"] += 1
            raise
        with _STATS_LOCK:
            a["answered"] += 1
            a["granted" if r.get("granted") else "refused"] += 1
            kind = _thread_kind()
            a["threads"][kind] = a["threads"].get(kind, 0) + 1
        return r

    admission.answer = counted


def instrument_idle() -> None:
    """Counts the heartbeat's idle-release passes (the heartbeat looks ``idle.release_idle`` up
    per pass), so the end can wait for passes instead of for time."""
    release = idle.release_idle

    def counted(ledger, now=None):
        out = release(ledger, now)
        with _STATS_LOCK:
            s = STATS["idle"]
            s["passes"] += 1
            for r in out:
                s[r["why"]] += 1
        return out

    idle.release_idle = counted


def instrument_commands(pack) -> None:
    """Counts every model command the host sends to ``pack`` (evictions and loads), by the
    thread that sent it (test instrumentation on the host's own object, as wddm_scenarios'
    trace does)."""
    send = pack.model_command

    def counted(generation, model, op, arg):
        key = f"{_thread_kind()}/{op}"
        try:
            done, refusal, report = send(generation, model, op, arg)
        except BaseException:
            with _STATS_LOCK:
                STATS["commands"].setdefault(key, [0, 0, 0, 0])[3] += 1
            raise
        with _STATS_LOCK:
            row = STATS["commands"].setdefault(key, [0, 0, 0, 0])
            row[0] += 1
            row[1] += int(done or 0)
            row[2] += refusal is not None
            if refusal is not None:
                why = STATS["refusals"].setdefault(key, {})
                reason = " ".join(str(refusal).split()[:4])
                why[reason] = why.get(reason, 0) + 1
        return done, refusal, report

    pack.model_command = counted


# --- the actors -------------------------------------------------------------------------------


class Actor:
    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = random.Random(f"{seed}-{name}")
        self.rounds = 0
        self.ops: dict[str, int] = {}
        self.models: dict[str, int] = {}  # name -> size
        self.problems: list[str] = []
        self.partial = 0  # loads that ended resident in part
        self.counter = 0

    def op(self, kind: str) -> None:
        self.ops[kind] = self.ops.get(kind, 0) + 1

    def record(self) -> dict:
        return {"rounds": self.rounds, "ops": self.ops, "partial_loads": self.partial}


class HostActor(Actor):
    """Host nodes: new models and old ones again through upstream's ``load_models_gpu`` (which
    evicts stand-ins through upstream's ``free_memory``), a node asking for room, and now and
    then everything off the card (``free_memory(1e30, cuda)``, what ``unload_all_models`` does
    per device)."""

    def __init__(self, card, seed: int, semantics: str) -> None:
        super().__init__("host", seed)
        self.card, self.semantics = card, semantics
        self.held: dict[str, HostModel] = {}

    def step(self, ex: Execution) -> None:
        r = self.rng.random()
        if not self.held or (len(self.held) < MAX_MODELS and r < 0.3):
            self.counter += 1
            name = f"host-{self.counter}"
            size = self.rng.choice(SIZES) * GIB
            self.op("load")
            model = ex.run(self.name, self._load_new, name, size)
            self._check_whole(model)
        elif r < 0.7:
            model = self.held[self.rng.choice(sorted(self.held))]
            self.op("use")
            ex.run(self.name, host_load, model)
            self._check_whole(model)
        elif r < 0.95:
            more = self.rng.choice([1, 2, 4]) * GIB
            self.op("free_memory")
            ex.run(self.name, lambda: mm.free_memory(mm.get_free_memory(CUDA) + more, CUDA))
        else:
            self.op("free_all")
            ex.run(self.name, mm.free_memory, 1e30, CUDA)

    def _load_new(self, name: str, size: int) -> HostModel:
        model = HostModel(self.card, name, size, size // PART)
        self.held[name] = model
        host_load(model)
        return model

    def _check_whole(self, model: HostModel) -> None:
        if model.loaded_size() < model.model_size():
            self.partial += 1


class WorkerActor(Actor):
    """A worker's nodes: a new model or an old one through its own ``load_models_gpu`` (each an
    admission), computing with it for a while, two models in one node (the first in use while
    the second is admitted), and the pack letting a model go."""

    def __init__(self, name: str, seed: int, semantics: str) -> None:
        super().__init__(name, seed)
        self.semantics = semantics
        self.pack = None
        self.generation = 0
        self.pids: list[int] = []
        self.after_kill = 0  # nodes that failed because the chaos thread killed the worker
        self.kills_seen = 0
        self.ledger_checks = 0
        self.asked = {"admit?": 0, "oom?": 0, "granted": 0, "refused": 0, "unanswered": 0}
        self.oom = 0
        self.history: collections.deque = collections.deque(maxlen=8)  # for a problem's report

    def start(self) -> None:
        self.pack, pid = worker(self.name, comfy=True)
        instrument_commands(self.pack)
        self.generation = self.pack.worker().generation
        self.pids.append(pid)

    def _ensure(self) -> bool:
        """On the execution thread: a worker that died is started again by its next node (the
        core respawns it); it starts on the card again and holds nothing. Returns whether it
        was started again."""
        w = self.pack.worker()
        if w.alive and w.generation == self.generation:
            return False
        if KILLS.get(self.name, 0) == self.kills_seen:
            self.problems.append(f"{self.name}: generation {self.generation} died unkilled")
        self.kills_seen = KILLS.get(self.name, 0)
        pid = call(self.pack, "setup_sim", True)
        self.generation = self.pack.worker().generation
        self.pids.append(pid)
        self.models.clear()
        return True

    def _node(self, fn: str, *args):
        if self._ensure():
            return RESPAWNED  # the node was chosen for models the dead worker held
        # A worker killed since ``_ensure`` is respawned by this call itself, not set up and
        # holding nothing: ``_guard`` sees the new generation and discards the node.
        out = self.pack.call(f"memory-pack:{fn}", *args)
        if isinstance(out, dict) and not self._replaced():
            self._check_ledger(out["held"])
        return out

    def _check_ledger(self, held: dict[str, int]) -> None:
        """Right after the node, still on the execution thread (its report reconciled during
        the call, and a model upstream dropped while the node used it inserted again at that
        boundary, ADR 0030): every model the worker holds has exactly one entry in upstream's
        list. An eviction since (the heartbeat's) leaves the entry until the next report."""
        self.ledger_checks += 1
        for n, b in held.items():
            if b <= 0:
                continue
            mine = [
                lm.model
                for lm in mm.current_loaded_models
                if isinstance(lm.model, StandIn)
                and lm.model.handle is self.pack
                and lm.model.model.name == n
            ]
            if len(mine) == 1 and mine[0].generation == self.generation:
                continue
            self.problems.append(
                f"{self.name}: after a node, {n} holds {b} bytes and upstream's list has "
                f"{[(s.generation, s.loaded_size()) for s in mine]} for it"
            )

    def _replaced(self) -> bool:
        """The worker is not the one ``_ensure`` last set up (the chaos thread killed it)."""
        w = self.pack.worker()
        return not w.alive or w.generation != self.generation

    def step(self, ex: Execution) -> None:
        r = self.rng.random()
        names = sorted(self.models)
        can_add = len(names) < MAX_MODELS
        if not names or (can_add and r < 0.3):
            self.counter += 1
            name = f"{self.name}-{self.counter}"
            size = self.rng.choice(SIZES) * GIB
            hold = self.rng.choice([0.0, 0.0, 0.0, 0.1])
            self.op("load")
            self._load(ex, "stress_load", name, size, name, size // MIB, size // PART, hold)
        elif r < 0.6:
            name = self.rng.choice(names)
            hold = self.rng.choice([0.0, 0.0, 0.05, 0.2])
            self.op("use")
            self._load(ex, "stress_load", name, self.models[name], name, 0, 1, hold)
        elif r < 0.85:
            held = self.rng.choice(names)
            others = [n for n in names if n != held]
            if can_add or not others:
                self.counter += 1
                name, size = f"{self.name}-{self.counter}", self.rng.choice(SIZES) * GIB
            else:
                name = self.rng.choice(others)
                size = self.models[name]
            self.op("pair")
            self.models.setdefault(name, size)
            self._load(ex, "stress_pair", name, size, held, name, size // MIB, size // PART)
        else:
            name = self.rng.choice(names)
            self.op("drop")
            self._guard(ex, "drop_fake", name)
            self.models.pop(name, None)

    def _load(self, ex: Execution, fn: str, name: str, size: int, *args) -> None:
        self.models.setdefault(name, size)
        out = self._guard(ex, fn, *args)
        if out is None:
            return
        granted = True
        for a in out["asked"]:
            self.asked[a["topic"]] += 1
            g = a["granted"]
            self.asked["granted" if g else "refused" if g is False else "unanswered"] += 1
            if g is None:
                self.problems.append(f"{self.name}: {a['topic']} for {name} got no answer")
            granted = granted and bool(g)
        if out["resident"] < size:
            self.partial += 1
            if self.semantics == "device_wide" and granted and out["asked"]:
                self.problems.append(
                    f"{self.name}: {name} admitted but loaded {out['resident']} of {size} bytes"
                )

    def _guard(self, ex: Execution, fn: str, *args):
        """Runs a node; a failure is the chaos thread's doing only if the worker it ran in is
        no longer the one running."""
        kills = KILLS.get(self.name, 0)
        before = (self.generation, sorted(self.models))
        try:
            out = ex.run(self.name, self._node, fn, *args)
        except Exception as e:
            if KILLS.get(self.name, 0) != kills or self._replaced():
                self._lost(f"{fn}{args} failed")
                return None
            text = f"{type(e).__name__}: {e}"
            if "OutOfMemory" in text:
                self.oom += 1
            self.problems.append(
                f"{self.name}: {fn}{args} failed (generation, models before: {before}; "
                f"the last nodes: {list(self.history)}): {text[:2000]}"
            )
            return None
        finally:
            w = self.pack.worker()
            self.history.append((fn, args[:2], w.generation, w.alive, KILLS.get(self.name, 0)))
        if out is RESPAWNED:
            self._lost(f"{fn}{args} not run: the worker had died")
            return None
        if self._replaced():  # the node ran in a worker the call itself started
            self._lost(f"{fn}{args} ran in a new worker")
            return None
        return out

    def _lost(self, what: str) -> None:
        self.after_kill += 1
        self.history.append(("killed", what, self.generation))
        self.models.clear()

    def record(self) -> dict:
        return {
            **super().record(),
            "generations": self.generation,
            "ledger_checks": self.ledger_checks,
            "failed_after_kill": self.after_kill,
            "asked": self.asked,
            "oom": self.oom,
        }


def run_actor(actor: Actor, ex: Execution, stop_at: float, errors: list) -> None:
    try:
        while time.monotonic() < stop_at:
            actor.step(ex)
            actor.rounds += 1
            time.sleep(actor.rng.uniform(0.0, 0.03))  # the user queueing the next prompt
    except BaseException:
        errors.append(f"{actor.name}: {traceback.format_exc()[-3000:]}")


# --- around the actors ------------------------------------------------------------------------


def _dead(pid: int) -> bool:
    """Gone, or a zombie: the driver has freed what it held."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def chaos(card, actors: list[WorkerActor], ex: Execution, seconds: float, t0: float, kills: list):
    """SIGKILLs a worker at evenly spaced moments, each of the kind not yet done (mid-call
    first, then idle, then in turn): mid-call, the worker whose node runs now, once it holds
    memory on the card (a worker still starting has nothing for the driver to free); idle, one
    with models in upstream's ledger (whose stand-ins must then leave it). Each waits for its
    moment until the next kill is due, however slow the machine; then frees the dead worker's
    memory on the card, as the driver does when a process dies (``reap``; on WDDM its exit is
    also a re-partition). A kind whose moment never came is recorded as skipped, with what the
    chaos thread saw, and the test says so."""
    n = max(1, round(seconds / 30))
    names = [a.name for a in actors]

    def ledgered(name: str) -> int:
        return sum(1 for s in LEDGER.standins(name) if not s.gone and s.loaded_size() > 0)

    def on_card(name: str) -> bool:
        pid = next(a for a in actors if a.name == name).pack.worker().pid
        return pid is not None and card.used_by(pid) > 0

    done = {"mid_call": 0, "idle": 0}
    for k in range(1, n + 1):
        at = t0 + seconds * k / (n + 1)
        until = t0 + seconds * (k + 1) / (n + 1)
        while time.monotonic() < at:
            time.sleep(0.005)
        kind = "mid_call" if done["mid_call"] <= done["idle"] else "idle"
        target, seen = None, {"polls": 0, "busy_on_card": 0, "idle_ledgered": 0}
        nodes_before = ex.nodes
        while target is None and time.monotonic() < until:
            busy = ex.inflight
            seen["polls"] += 1
            if busy in names and on_card(busy):
                seen["busy_on_card"] += 1
                if kind == "mid_call":
                    target = busy
                    break
            idle = [x for x in names if x != busy and ledgered(x)]
            if idle:
                seen["idle_ledgered"] += 1
                if kind == "idle":
                    target = max(idle, key=ledgered)
                    break
            time.sleep(0.001)
        if target is None:
            seen["nodes_run"] = ex.nodes - nodes_before
            kills.append({"kind": kind, "skipped": f"no moment in {until - at:.1f} s", **seen})
            continue
        standins = ledgered(target)
        a = next(x for x in actors if x.name == target)
        w = a.pack.worker()
        pid, generation = w.pid, w.generation
        if pid is None or not w.alive:
            kills.append({"kind": kind, "worker": target, "skipped": "not running"})
            continue
        held = card.used_by(pid)
        KILLS[target] = KILLS.get(target, 0) + 1
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not _dead(pid) and time.monotonic() < deadline:
            time.sleep(0.005)
        done[kind] += 1
        kills.append(
            {
                "t": round(time.monotonic() - t0, 3),
                "kind": kind,
                "worker": target,
                "pid": pid,
                "generation": generation,
                "mid_call": busy == target,
                "held": held,
                "standins": standins,
                # The driver frees a dead process's memory (nothing to free: nothing reaped).
                "reaped": pid in card.reap(),
            }
        )


def _reported(fn, errors: list[str], *args) -> None:
    """Runs ``fn``; an exception it raises is a problem of the run, with its traceback (a
    chaos thread that died was seen only as "no worker was killed")."""
    try:
        fn(*args)
    except Exception:
        errors.append(f"{fn.__name__} raised: {traceback.format_exc()}")


def sampler(card, stop: threading.Event, out: dict) -> None:
    while not stop.is_set():
        out["peak_overcommitted"] = max(out["peak_overcommitted"], card.overcommitted())
        out["min_true_free"] = min(out["min_true_free"], card.free())
        out["samples"] += 1
        time.sleep(0.005)


def status_reader(stop: threading.Event) -> None:
    """The ``/airlock/status`` route, on ComfyUI's server thread."""
    while not stop.is_set():
        try:
            loader.memory_status()
            STATS["status_reads"] += 1
        except Exception as e:
            STATS["status_errors"].append(f"{type(e).__name__}: {e}")
        time.sleep(0.05)


def wait_passes(n: int, timeout: float) -> bool:
    """Waits for ``n`` more heartbeat idle-release passes to complete."""
    target = STATS["idle"]["passes"] + n + 1  # one in flight may have read the old settings
    deadline = time.monotonic() + timeout
    while STATS["idle"]["passes"] < target:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# --- the end: nothing lost --------------------------------------------------------------------


def final_check(card, host: HostActor, workers: list[WorkerActor]) -> tuple[dict, list[str]]:
    """On the execution thread, with every actor stopped: a last report from each live worker
    (a call), a sync, then the ledger against the workers and the card."""
    problems: list[str] = []
    states = {}
    for a in workers:
        w = a.pack.worker()
        if w.alive and w.generation == a.generation:
            states[a.name] = call(a.pack, "stress_state")
    heartbeat.sync()
    entries = [lm.model for lm in mm.current_loaded_models if lm.model is not None]
    out: dict = {"workers": {}}
    for a in workers:
        mine = [s for s in entries if isinstance(s, StandIn) and s.handle is a.pack]
        known = LEDGER.standins(a.name)
        stale = [s for s in known if s.generation != a.generation or s.gone]
        stale += [s for s in mine if s.generation != a.generation or s.gone]
        if stale:
            problems.append(f"{a.name}: stand-ins of a dead generation remain: {stale}")
        st = states.get(a.name)
        if st is None:  # killed at the very end: nothing of it may remain
            if mine or known:
                problems.append(f"{a.name}: dead, but its stand-ins remain: {mine or known}")
            out["workers"][a.name] = {"alive": False}
            continue
        pid = st["pid"]
        truth = card.used_by(pid)
        held = {n: b for n, b in st["fakes"].items() if b > 0}
        ledger = sum(int(s.loaded_size()) for s in mine)
        for n, b in held.items():
            if not st["listed"][n]:
                problems.append(f"{a.name}: {n} holds {b} bytes but is not in its own ledger")
            rows = [s for s in mine if s.model.name == n]
            if len(rows) != 1 or rows[0].loaded_size() != b:
                problems.append(
                    f"{a.name}: {n} holds {b} bytes; upstream's list has {len(rows)} "
                    f"stand-in(s) for it ({[s.loaded_size() for s in rows]} bytes)"
                )
        for s in mine:
            if s.model.name not in held:
                problems.append(f"{a.name}: a stand-in for {s.model.name}, which holds nothing")
        if not (ledger == sum(held.values()) == st["booked"] == truth):
            problems.append(
                f"{a.name}: ledger {ledger}, worker {sum(held.values())}, "
                f"card {truth} bytes (pid {pid})"
            )
        out["workers"][a.name] = {
            "alive": True,
            "pid": pid,
            "generation": a.generation,
            "models": len(held),
            "ledger": ledger,
            "truth": truth,
        }
    host_entries = [m for m in entries if not isinstance(m, StandIn)]
    host_ledger = sum(int(m.loaded_size()) for m in host_entries)
    for m in host.held.values():
        n = sum(1 for e in host_entries if e is m)
        if m.loaded_size() > 0 and n != 1:
            problems.append(f"host: {m.name} holds {m.loaded_size()} bytes, {n} ledger entries")
    if host_ledger != card.used_by(HOST):
        problems.append(f"host: ledger {host_ledger}, card {card.used_by(HOST)} bytes")
    live = {HOST} | {w["pid"] for w in out["workers"].values() if w.get("alive")}
    others = sorted({pid for pid, _tag, _n in card.bookings()} - live)
    if others:
        problems.append(f"bookings of processes no longer running: {others}")
    out["host"] = {"ledger": host_ledger, "truth": card.used_by(HOST), "models": len(host_entries)}
    out["entries"] = len(entries)
    return out, problems


def children() -> list[int]:
    """Live (non-zombie) child processes of this process."""
    me, out = str(os.getpid()), []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if fields.get("PPid", "").strip() == me and not fields["State"].strip().startswith("Z"):
            out.append(int(d))
    return out


def stuck(threads: list[threading.Thread], result: dict) -> None:
    """A thread did not finish: dump every stack and stop here (closing could hang too)."""
    sys.stderr.write(f"STUCK: {[t.name for t in threads]}\n")
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    result["stuck"] = [t.name for t in threads]
    result["problems"].append(f"threads did not finish: {result['stuck']}")
    print("RESULT " + json.dumps(result), flush=True)
    sys.stderr.flush()
    for p in children():
        os.kill(p, signal.SIGKILL)
    os._exit(3)


def main() -> None:
    semantics = sys.argv[1]
    seconds = float(sys.argv[sys.argv.index("--seconds") + 1]) if "--seconds" in sys.argv else 90
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 1234
    global GRACE_S
    if "--grace" in sys.argv:  # shorter, to see the watchdog fire (docs/memory.md, "Stress")
        GRACE_S = float(sys.argv[sys.argv.index("--grace") + 1])
    # A last resort if even the stuck report hangs.
    faulthandler.dump_traceback_later(seconds + 3 * GRACE_S + 300, exit=True)
    instrument_admission()
    instrument_idle()
    mm.current_loaded_models = GuardedList(mm.current_loaded_models)
    card = start(semantics)
    # After the card: the settings are read once, and name the card the host reads.
    knobs = settings.get()
    knobs.heartbeat_s, knobs.idle_release_s = HEARTBEAT_S, IDLE_RELEASE_S
    knobs.pressure_free = PRESSURE_FREE
    t_setup = time.monotonic()
    workers = [WorkerActor(n, seed, semantics) for n in WORKERS]
    # Side by side, as comfy-airlock loads packs (loader.load_isolated_packs); nobody holds a model yet.
    with ThreadPoolExecutor(max_workers=len(workers)) as pool:
        list(pool.map(WorkerActor.start, workers))
    host = HostActor(card, seed, semantics)
    setup_s = time.monotonic() - t_setup
    ALLOWED.discard("MainThread")  # from now on, one thread runs ComfyUI
    ex = Execution()
    stop = threading.Event()
    watch = {"peak_overcommitted": 0, "min_true_free": card.total, "samples": 0}
    side = [
        threading.Thread(target=sampler, args=(card, stop, watch), name="sampler"),
        threading.Thread(target=status_reader, args=(stop,), name="status"),
    ]
    for t in side:
        t.start()
    errors: list[str] = []
    kills: list[dict] = []
    t0 = time.monotonic()
    stop_at = t0 + seconds
    actors = [host, *workers]
    threads = [
        threading.Thread(target=run_actor, args=(a, ex, stop_at, errors), name=f"actor-{a.name}")
        for a in actors
    ]
    threads.append(
        threading.Thread(
            target=_reported,
            args=(chaos, errors, card, workers, ex, seconds, t0, kills),
            name="chaos",
        )
    )
    for t in threads:
        t.start()
    result: dict = {"semantics": semantics, "seconds": seconds, "seed": seed, "problems": []}
    for t in threads:
        t.join(timeout=max(0.0, stop_at + GRACE_S - time.monotonic()))
    duration = time.monotonic() - t0
    result.update({"duration_s": round(duration, 1), "kills": kills})
    if any(t.is_alive() for t in threads):
        stuck([t for t in threads if t.is_alive()], result)
    # Quiet: no more idle release or pressure relief, and the passes under way are over.
    knobs.idle_release_s, knobs.pressure_free = None, 0
    if not wait_passes(2, GRACE_S):
        stuck([t for t in threading.enumerate() if t.name == "airlock-heartbeat"], result)
    card.reap()
    final_box: dict = {}

    def final():
        try:
            final_box["value"] = final_check(card, host, workers)
        except Exception:
            final_box["value"] = {}, [f"the final check failed: {traceback.format_exc()}"]

    checker = threading.Thread(target=lambda: ex.run("final", final), name="final-check")
    checker.start()
    checker.join(GRACE_S)
    if checker.is_alive():
        stuck([checker], result)
    stop.set()
    for t in side:
        t.join()
    ex.stop()
    final_state, problems = final_box["value"]
    from comfy_airlock.host.memory.evict import arbiter

    stats = arbiter().stats()
    problems = [*errors, *problems]
    for a in actors:
        problems += a.problems
    if STATS["admissions"]["errors"]:
        problems.append(f"{STATS['admissions']['errors']} admissions raised instead of answering")
    if STRAY:
        problems.append(f"upstream's list changed off the execution thread: {STRAY}")
    problems += [f"status read failed: {e}" for e in STATS["status_errors"][:5]]
    if watch["peak_overcommitted"] or card.overcommitted():
        problems.append(f"past the card: {watch['peak_overcommitted']} bytes at the peak")
    if card.demotions_total()["count"]:
        problems.append(f"bystanders demoted: {card.demotions_total()}")
    if stats["in_flight"] or stats["waiting"] or stats["holds"] or stats["errors"]:
        problems.append(f"the arbiter did not come back to rest: {stats}")
    if not [k for k in kills if "pid" in k]:
        problems.append(f"no worker was killed: {kills}")
    pids = sorted({p for a in workers for p in a.pids})
    close_all()
    leaked = children()
    if leaked:
        problems.append(f"processes outlived the run: {leaked}")
        for p in leaked:
            os.kill(p, signal.SIGKILL)
    result.update(
        {
            "duration_s": round(duration, 1),
            "setup_s": round(setup_s, 1),
            "nodes": ex.nodes,
            "actors": {a.name: a.record() for a in actors},
            "kills": kills,
            "worker_pids": pids,
            "admissions": STATS["admissions"],
            "commands": STATS["commands"],
            "refusals": STATS["refusals"],
            "idle": STATS["idle"],
            "status_reads": STATS["status_reads"],
            "arbiter": stats,
            "watch": watch,
            "demotions": card.demotions_total(),
            "final": final_state,
            "problems": problems,
            "stuck": [],
        }
    )
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

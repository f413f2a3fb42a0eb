"""Admission and the reserve on both semantics of the simulated card (device-wide and WDDM),
against the REAL upstream ``comfy.model_management`` (ComfyUI 0.30.0, ``--cpu``) with real
workers of tests/packs/memory-pack.

Run as ``python wddm_scenarios.py SCENARIO SEMANTICS [--trace FILE]``, one fresh process per run
(upstream's ledger is module state); prints one JSON object (``RESULT {...}``). ``SEMANTICS`` is
``device_wide`` or ``wddm`` (the seed's measured biases). ``AIRLOCK_RESERVE=off`` in the
environment runs the host without the published reserve. Scenarios (docs/memory.md):

- ``headline``: the seed's. A worker holds 12 GiB of a 16 GiB card; the host loads 6 GiB through
  upstream's own ``load_models_gpu``.
- ``admission``: a worker loads through its own ``load_models_gpu``; the host admits it, freeing
  room across an idle worker, a busy one, the requester and its own models.
- ``contention``: two workers and the host load and reuse models for many seeded rounds.
- ``oom``, ``idle``: a worker's OOM retried once; idle workers' models released on time and
  under pressure.
- ``holds``: three admissions in one node, each hold given back when its load is done.
- ``mismatch``: a worker whose CUDA device is another card than the host's is refused.
- ``floor``: a worker's floor (its CUDA context) measured once, from NVML.

The host's reading of the fake ``cuda:0`` is its view of the card (scenario_host.py); the host
attaches to the card first, as its CUDA context exists before any worker starts. Workers read
theirs through the pack's own hook (tests/packs/memory-pack/sim_free.py).
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from pathlib import Path

from scenario_host import (
    CARD,
    DECISIONS,
    GIB,
    MIB,
    REF_KEEP,
    TMP,
    LocalModel,
    call,
    close_all,
    load_pack,
    mm,
    new_card,
)

from comfy_airlock import settings
from comfy_airlock.card import truth
from comfy_airlock.device import SIM_GPU_ENV, SimGpu
from comfy_airlock.host.memory import heartbeat
from comfy_airlock.host.memory.evict import arbiter
from comfy_airlock.host.memory.ledger import LEDGER
from comfy_airlock.host.memory.reserve import RESERVE

HOST = os.getpid()
TOTAL = 16 * GIB


class HostModel(LocalModel):
    """A model the host loads itself through upstream's ``load_models_gpu``: not resident until
    upstream loads it, then booked part by part."""

    def __init__(self, card, name, nbytes, parts):
        per = nbytes // parts
        super().__init__(card, name, [[per, False] for _ in range(parts)])
        REF_KEEP.append(self)

    def partially_load(self, d, extra, force_patch_weights=False):
        loaded = 0
        for p in self.parts:
            if not p[1] and loaded + p[0] <= extra:
                p[1] = True
                loaded += p[0]
        self._book()
        return loaded

    def _book(self):
        super()._book()
        for t in TRACE:
            t.sample()


def host_load(model):
    """The host's own load, as a host node does it."""
    mm.load_models_gpu([model])


def upstream_need(nbytes: int, reserve: int) -> int:
    """What upstream's ``load_models_gpu`` wants free for ``nbytes`` of weights with ``reserve``
    as ``EXTRA_RESERVED_VRAM`` (ComfyUI 0.30.0): ``1.1 x weights + max(0.8 GiB + reserve,
    reserve)``."""
    return int(nbytes * 1.1 + max(0.8 * GIB + reserve, reserve))


class Trace:
    """Free memory over time: the truth, the host's view, the reserve, each worker's view.

    Sampled on a timer (for what happens in the workers on their own) and after every change
    the host makes or asks for: its own bookings (``HostModel``) and every command to a worker
    model (:meth:`watch`), so that each step of an eviction is a sample."""

    def __init__(self, card, period=0.05):
        self.card, self.period = card, period
        self.t0 = time.monotonic()
        self.workers: dict[str, int] = {}
        self.samples: list[list] = []
        self.marks: list[list] = []
        self.peak_over = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        TRACE[:] = [self]

    def sample(self):
        c = self.card
        with self._lock:
            t = round(time.monotonic() - self.t0, 6)
            row = [
                c.free(),
                c.free_seen_by(HOST),
                int(mm.EXTRA_RESERVED_VRAM),
                *(c.free_seen_by(p) for p in self.workers.values()),
            ]
            self.peak_over = max(self.peak_over, c.overcommitted())
            if not self.samples or self.samples[-1][1:] != row:
                self.samples.append([t, *row])

    def watch(self, pack):
        """Samples after every command the host sends to ``pack``'s models (test
        instrumentation on the host's own object; the worker is not touched)."""
        send = pack.model_command

        def model_command(*args):
            try:
                return send(*args)
            finally:
                self.sample()

        pack.model_command = model_command

    def mark(self, label):
        self.sample()
        self.marks.append([round(time.monotonic() - self.t0, 6), label])

    def _run(self):
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.period)

    def stop(self):
        self._stop.set()
        self._thread.join()
        self.sample()
        TRACE.clear()
        return {
            # A row has a worker's column once that worker has started.
            "columns": ["t", "true_free", "host_view", "reserve", *self.workers],
            "samples": self.samples,
            "marks": self.marks,
        }


TRACE: list[Trace] = []  # the scenario's trace, sampled by the host's own bookings


def card_state(card):
    return {
        "true_free": card.free(),
        "host_view": card.free_seen_by(HOST),
        "overcommitted": card.overcommitted(),
        "demotions": card.demotions_total(),
        "reserve": int(mm.EXTRA_RESERVED_VRAM),
    }


def start(semantics: str):
    card = new_card("card", TOTAL, semantics)
    card.attach(HOST)  # the host's CUDA context exists before any worker starts
    return card


def worker(name: str, trace: Trace | None = None, comfy: bool = False):
    """A worker of the memory pack under ``name``, started on the card. ``comfy``: it loads
    through its own ComfyUI (importing it costs seconds, so only those that do)."""
    pack = load_pack(name)
    pid = call(pack, "setup_sim", comfy)
    if trace is not None:
        trace.workers[name] = pid
        trace.watch(pack)
    return pack, pid


# --- a. the seed's headline ------------------------------------------------------------------

HEADLINE_WORKER = [("W1", 4), ("W2", 4), ("W3", 4)]  # name, GiB (in parts of 1 GiB)
HEADLINE_SMALL = [(f"S{i}", 2) for i in range(1, 7)]  # the same 12 GiB in six models
HEADLINE_HOST = 6 * GIB  # in 6 parts of 1 GiB


def scenario_headline(semantics: str):
    """A worker holds 12 GiB of a 16 GiB card (three models of 4 GiB); the host loads 6 GiB
    through upstream's ``load_models_gpu``."""
    return headline(semantics, HEADLINE_WORKER)


def scenario_headline_small(semantics: str):
    """The headline with the worker's 12 GiB in six models of 2 GiB, each smaller than what
    upstream asks to free: upstream detaches such a model whole without asking for a part."""
    return headline(semantics, HEADLINE_SMALL)


def headline(semantics: str, models: list[tuple[str, int]]):
    card = start(semantics)
    trace = Trace(card)
    pack, wpid = worker("memory-pack", trace)
    for name, gib in models:
        call(pack, "make_model", name, gib * 1024, "cuda:0", gib, True)
    heartbeat.sync()
    heartbeat.update_reserve()
    trace.mark("worker holds 12 GiB")
    base = RESERVE.base
    base = int(mm.EXTRA_RESERVED_VRAM) if base is None else base
    before = card_state(card)
    worker_before = card.used_by(wpid)
    model = HostModel(card, "H", HEADLINE_HOST, 6)
    trace.mark("host loads 6 GiB")
    host_load(model)
    trace.mark("host loaded")
    after = card_state(card)
    worker_after = card.used_by(wpid)
    # Upstream drops every worker entry it detached, and the worker unloaded each whole (ADR
    # 0030): none may be resident and out of the ledger.
    popped = sorted(r["name"] for r in LEDGER.rows() if r["resident"] > 0 and not r["in_ledger"])
    ledger = {r["name"]: r["resident"] for r in LEDGER.rows() if r["in_ledger"]}
    residency = call(pack, "residency")
    time.sleep(0.3)
    trace.mark("end")
    need = upstream_need(HEADLINE_HOST, base)
    return {
        "semantics": semantics,
        "reserve_enabled": settings.get().reserve,
        "base_reserve": base,
        "before": before,
        "after": after,
        "need": need,
        "optimal_evicted": max(0, need - before["true_free"]),
        "evicted": worker_before - worker_after,
        "largest_model": max(g for _, g in models) * GIB,
        "host_resident": model.loaded_size(),
        "worker_residency": residency,
        "popped_kept": popped,
        "ledger_after_heartbeat": ledger,
        "worker_demotions": card.demotions(wpid),
        "peak_overcommitted": trace.peak_over,
        "trace": trace.stop(),
    }


# --- b. a worker load admitted by the host ---------------------------------------------------

# Made in this order (least recently used first): A's own model is the oldest of all.
ADMISSION_MODELS = [("A", "a0"), ("C", "c1"), ("C", "c2"), ("B", "b2"), ("B", "b1")]
ADMISSION_MODEL = 2 * GIB  # each, in 4 parts
ADMISSION_HOST = 4 * GIB  # in 4 parts of 1 GiB
ADMISSION_LOAD = 10 * GIB  # A's new model, in 10 parts


def key_names():
    """(pack, generation, model id) -> model name, for every stand-in."""
    return {
        (s.handle.name, s.generation, s.model.model_id): s.model.name for s in LEDGER.standins()
    }


def named(rows, names_by_key):
    """Rows of an admission (steps, candidates) with the model's name."""
    return [
        {**r, "name": names_by_key.get((r["owner"], r["generation"], r["model"]))} for r in rows
    ]


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.02)


def scenario_admission(semantics: str):
    """Worker A loads 10 GiB through its own ``load_models_gpu`` on a card where the host holds
    4 GiB, idle worker C two models, worker B two (one of them used by B's running node) and A
    one: the host admits it by policy (C's, then B's free one, then A's own; B's busy one
    never), then the residual from its own models through upstream."""
    card = start(semantics)
    trace = Trace(card)
    host = HostModel(card, "H1", ADMISSION_HOST, 4)
    host_load(host)
    packs = {}
    for name in ("A", "B", "C"):
        packs[name], _ = worker(name, trace, comfy=name == "A")
    for owner, model in ADMISSION_MODELS:
        call(packs[owner], "make_model", model, ADMISSION_MODEL // MIB, "cuda:0", 4, True)
    flag = Path(CARD[0].path + ".release")
    holder = threading.Thread(
        target=call, args=(packs["B"], "hold_in_use_until", "b1", str(flag), 120)
    )
    holder.start()
    wait_for(lambda: any(s.model.name == "b1" and s.in_use for s in LEDGER.standins("B")))
    heartbeat.sync()
    names_by_key = key_names()
    before = card_state(card)
    trace.mark("A loads 10 GiB")
    resident = call(packs["A"], "load_fake", "P", ADMISSION_LOAD // MIB, 10)
    trace.mark("A loaded")
    after = card_state(card)
    flag.touch()
    holder.join()
    admission = [a for a in DECISIONS.admissions if a["pack"] == "A"][-1]
    steps = named(admission["steps"], names_by_key)
    residency = {n: call(p, "residency") for n, p in packs.items()}
    trace.stop()
    return {
        "semantics": semantics,
        "before": before,
        "after": after,
        "need": admission["need"],
        "admission": {k: v for k, v in admission.items() if k not in ("steps", "candidates")},
        "steps": steps,
        "candidates": named(admission.get("candidates", []), names_by_key),
        "loaded": resident,
        "host_resident": host.loaded_size(),
        "residency": residency,
        "fakes": call(packs["A"], "fakes"),
        "asked": call(packs["A"], "asked"),
        "peak_overcommitted": trace.peak_over,
    }


# --- c. two workers and the host contending --------------------------------------------------

CONTENTION_SIZES = [1, 2, 3, 4]  # GiB, in parts of 512 MiB
CONTENTION_MAX_MODELS = 4  # per actor


def scenario_oom(semantics: str):
    """Worker A is admitted to load 4 GiB; before it loads, another process takes 7 GiB of the
    card (the admission's room is gone), so A's load runs out of memory. A asks the host again
    (``oom?``), the host evicts idle worker B's model, and A's one retry fits."""
    card = start(semantics)
    packs = {}
    for name in ("A", "B"):
        packs[name], _ = worker(name, comfy=name == "A")
    call(packs["B"], "make_model", "b0", 6 * GIB // MIB, "cuda:0", 6, True)
    heartbeat.sync()
    before = card_state(card)
    resident = call(packs["A"], "load_fake_contended", "P", 4 * GIB // MIB, 4, HOST, 7 * GIB // MIB)
    after = card_state(card)
    asked = call(packs["A"], "asked")
    answers = [a for a in DECISIONS.admissions if a["pack"] == "A"]
    return {
        "semantics": semantics,
        "resident": resident,
        "before": before,
        "after": after,
        "asked": [a["topic"] for a in asked],
        "answers": [
            {
                "topic": a["topic"],
                "granted": a["granted"],
                "freed": sum(s["freed"] for s in a["steps"]),
            }
            for a in answers
        ],
        "b_resident": call(packs["B"], "residency")["b0"],
    }


def scenario_idle(semantics: str):
    """Idle release: with ``AIRLOCK_IDLE_RELEASE_S=1``, idle worker B's model leaves the card
    while worker A, whose node runs with its model, keeps it. Then pressure: with the idle
    timer off and ``AIRLOCK_PRESSURE_FREE_MIB`` = 13 GiB on a card with 8 GiB free, idle
    workers' models go, least recently used first, until 13 GiB are free, and no further."""
    card = start(semantics)
    packs = {}
    pids = {}
    for name in ("A", "B"):
        packs[name], pids[name] = worker(name)
    call(packs["B"], "make_model", "b0", 2 * GIB // MIB, "cuda:0", 4, True)
    call(packs["A"], "make_model", "a0", 2 * GIB // MIB, "cuda:0", 4, True)
    heartbeat.sync()
    flag = Path(CARD[0].path + ".idle-release")
    holder = threading.Thread(
        target=call, args=(packs["A"], "hold_in_use_until", "a0", str(flag), 120)
    )
    settings.get().idle_release_s = 1.0
    holder.start()
    # The card moves inside the heartbeat's release; its record lands after it returns.
    wait_for(
        lambda: (
            card.used_by(pids["B"]) == 0 and any(r["why"] == "idle" for r in DECISIONS.released)
        ),
        timeout=20,
    )
    timed = {"B": card.used_by(pids["B"]), "A": card.used_by(pids["A"])}
    flag.touch()
    holder.join()
    timed_released = [r["model"] for r in DECISIONS.released if r["why"] == "idle"]
    settings.get().idle_release_s = None
    for name, model in (("A", "a1"), ("B", "b1"), ("B", "b2")):
        call(packs[name], "make_model", model, 2 * GIB // MIB, "cuda:0", 4, True)
        time.sleep(0.05)  # distinct last-used times
    heartbeat.sync()
    before = card.free()
    settings.get().pressure_free = 13 * GIB
    wait_for(lambda: card.free() >= 13 * GIB, timeout=20)
    time.sleep(1.0)  # a few more heartbeats: nothing more may go
    pressure = [r for r in DECISIONS.released if r["why"] == "pressure"]
    return {
        "semantics": semantics,
        "timed": timed,
        "timed_released": timed_released,
        "pressure_before": before,
        "pressure_after": card.free(),
        "pressure_released": pressure,
        "residency": {n: call(p, "residency") for n, p in packs.items()},
    }


def scenario_contention(semantics: str):
    """Two workers and the host load new models and use old ones again, in rounds chosen by a
    seeded generator (``AIRLOCK_ROUNDS``, ``AIRLOCK_SEED``)."""
    rounds = int(os.environ.get("AIRLOCK_ROUNDS", "50"))
    rng = random.Random(int(os.environ.get("AIRLOCK_SEED", "1234")))
    card = start(semantics)
    trace = Trace(card)
    base = int(mm.EXTRA_RESERVED_VRAM)
    packs, pids = {}, {}
    for name in ("W1", "W2"):
        packs[name], pids[name] = worker(name, trace, comfy=True)
    owned: dict[str, list[str]] = {"host": [], "W1": [], "W2": []}
    sizes: dict[str, int] = {}
    host_models: dict[str, HostModel] = {}
    last_used: dict[str, int] = {}  # model -> round it was last asked for
    log = []
    for r in range(rounds):
        actor = rng.choice(["host", "W1", "W2"])
        mine = owned[actor]
        new = not mine or (len(mine) < CONTENTION_MAX_MODELS and rng.random() < 0.5)
        if new:
            name = f"{actor}-{r}"
            sizes[name] = rng.choice(CONTENTION_SIZES) * GIB
            mine.append(name)
        else:
            name = rng.choice(mine)
        seen = len(DECISIONS.admissions)
        names_by_key = key_names()
        used_before, demoted_before = card.used(), card.demotions_total()["bytes"]
        free_before, view_before = card.free(), card.free_seen_by(HOST)
        reserve_before = int(mm.EXTRA_RESERVED_VRAM)
        resident_before = resident_of(actor, name, packs, host_models)
        if actor == "host":
            if new:
                host_models[name] = HostModel(card, name, sizes[name], sizes[name] // (GIB // 2))
            host_load(host_models[name])
        elif new:
            call(packs[actor], "load_fake", name, sizes[name] // MIB, sizes[name] // (GIB // 2))
        else:
            call(packs[actor], "use_fake", name)
        resident = resident_of(actor, name, packs, host_models)
        admissions = [a for a in DECISIONS.admissions[seen:] if a["pack"] == actor]
        loaded = resident - resident_before
        log.append(
            {
                "round": r,
                "actor": actor,
                "model": name,
                "new": new,
                "size": sizes[name],
                "loaded": loaded,
                "resident": resident,
                "free_before": free_before,
                "host_view_before": view_before,
                "reserve_before": reserve_before,
                "free_after": card.free(),
                "evicted": used_before + loaded - card.used(),
                "overcommitted": card.overcommitted(),
                "demoted": card.demotions_total()["bytes"] - demoted_before,
                "admissions": [
                    {
                        "granted": a["granted"],
                        "need": a["need"],
                        "free_before": a["free_before"],
                        "free": a["free"],
                        "steps": named(a["steps"], names_by_key),
                        "candidates": [
                            {**c, "round": last_used.get(c["name"])}
                            for c in named(a.get("candidates", []), names_by_key)
                        ],
                    }
                    for a in admissions
                ],
            }
        )
        last_used[name] = r
    # The ledger against the card: a report from every worker first (as after any call).
    fakes = {n: call(p, "fakes") for n, p in packs.items()}
    heartbeat.sync()
    ledger = {n: 0 for n in packs} | {"host": 0}
    for lm in mm.current_loaded_models:
        p = lm.model
        if p is None:
            continue
        owner = p.handle.name if hasattr(p, "handle") else "host"
        ledger[owner] += int(p.loaded_size())
    truth = {n: card.used_by(pid) for n, pid in pids.items()} | {"host": card.used_by(HOST)}
    trace.stop()
    return {
        "semantics": semantics,
        "rounds": log,
        "ledger": ledger,
        "truth": truth,
        "standins": {
            n: sum(s.loaded_size() for s in LEDGER.standins(n) if not s.gone) for n in packs
        },
        "worker_ledgers": {n: sum(f.values()) for n, f in fakes.items()},
        "demotions": card.demotions_total(),
        "peak_overcommitted": trace.peak_over,
        "reserve": {
            "base": RESERVE.base,
            "term": RESERVE.rule.term,
            "published": RESERVE.published,
            "enabled": settings.get().reserve,
        },
        "base_reserve": base,
        "reserve_end": int(mm.EXTRA_RESERVED_VRAM),
        "arbiter": arbiter().stats(),
    }


def scenario_holds(semantics: str):
    """Admission holds (host/admission.py): one node of worker A loads three models of 3 GiB in
    turn on a card with 12 GiB free. Each admission holds its bytes until the worker says that
    load is done, so the next one, in the same call, counts nothing twice: none is held, none
    evicts anything, all are granted; at the end no hold is left. (ComfyUI's model management
    is already imported when the node runs: the worker loads ComfyUI's nodes first.)"""
    card = start(semantics)
    pack, _ = worker("A")
    call(pack, "make_model", "pad", 4 * GIB // MIB, "cuda:0", 4, True)
    comfy_before = call(pack, "comfy_imported")
    heartbeat.sync()
    seen = len(DECISIONS.admissions)
    resident = call(pack, "load_fakes", [[f"m{i}", 3 * GIB // MIB, 3] for i in range(3)])
    answers = [a for a in DECISIONS.admissions[seen:] if a["pack"] == "A"]
    return {
        "semantics": semantics,
        "resident": resident,
        "answers": [
            {k: a.get(k) for k in ("topic", "granted", "held", "need", "free_before", "hold")}
            | {"steps": len(a["steps"])}
            for a in answers
        ],
        "arbiter": arbiter().stats(),
        "free_after": card.free(),
        "comfy_before": comfy_before,
    }


def scenario_mismatch(semantics: str):
    """Device truth by UUID: worker X's environment puts another card first (as a pack's
    ``CUDA_VISIBLE_DEVICES`` would), so its ``cuda:0`` is not the host's. Its first report
    says so: the call fails with ``DeviceMismatch`` naming the pack and both UUIDs, and none of
    its models enters the host's ledger; worker Y, on the host's card, is unaffected."""
    card = start(semantics)
    truth()  # the host's device truth is chosen now, on its own card, once per process
    other = SimGpu.create(str(TMP / "other"), TOTAL, "other", semantics=semantics)
    os.environ[SIM_GPU_ENV] = other.path + os.pathsep + card.path
    try:
        x = load_pack("X")
        x.worker()  # started with the other card first
    finally:
        os.environ[SIM_GPU_ENV] = card.path
    error = None
    try:
        call(x, "make_model", "x0", 1024, "cuda:0", 1, True)
    except Exception as e:
        error = {
            "type": type(e).__name__,
            "message": str(e),
            "pack": getattr(e, "pack", None),
            "host_uuid": getattr(e, "host_uuid", None),
            "worker_uuid": getattr(e, "worker_uuid", None),
        }
    y, _ = worker("Y")
    call(y, "make_model", "y0", 1024, "cuda:0", 1, True)
    heartbeat.sync()
    return {
        "semantics": semantics,
        "refusal": error,
        "card_uuid": card.uuid,
        "other_uuid": other.uuid,
        "x_booked_on_other": other.used_by(x.worker().pid),
        "ledger": sorted(
            f"{lm.model.handle.name}:{lm.model.model.name}"
            for lm in mm.current_loaded_models
            if lm.model is not None and hasattr(lm.model, "handle")
        ),
        "mismatched": sorted(LEDGER.mismatched),
    }


FLOOR_CONTEXT = 300 * MIB


def scenario_floor(semantics: str):
    """The worker's floor (worker/floor.py): a worker starts on the card with a 300 MiB CUDA
    context (booked by the test pack, as a real context occupies the card) and then holds two
    models. Its floor is measured once, from NVML (the fake library reporting the card), on
    the first report after its context exists, and stays; the card's bookings of the worker
    equal its floor plus its models. Under WDDM, NVML reports no per-process memory."""
    card = start(semantics)
    pack, pid = worker("F")
    before_context = call(pack, "report")["floor"]
    call(pack, "book_context", FLOOR_CONTEXT // MIB)
    after_context = call(pack, "report")["floor"]
    call(pack, "make_model", "f0", 2048, "cuda:0", 2, True)
    call(pack, "make_model", "f1", 1024, "cuda:0", 1, True)
    report = call(pack, "report")
    heartbeat.sync()
    return {
        "semantics": semantics,
        "context": FLOOR_CONTEXT,
        "before_context": before_context,
        "after_context": after_context,
        "after_models": report["floor"],
        "host_sees": (LEDGER.last_report("F") or {}).get("floor"),
        "models_resident": sum(r["resident"] for r in report["models"]),
        "booked": card.used_by(pid),
    }


def resident_of(actor, name, packs, host_models):
    if actor == "host":
        m = host_models.get(name)
        return m.loaded_size() if m is not None else 0
    return int(call(packs[actor], "fakes").get(name, 0))


def main():
    scenario, semantics = sys.argv[1], sys.argv[2]
    trace_file = None
    if "--trace" in sys.argv:
        trace_file = Path(sys.argv[sys.argv.index("--trace") + 1])
    try:
        result = globals()[f"scenario_{scenario}"](semantics)
    finally:
        close_all()
    if trace_file is not None:
        trace_file.write_text(json.dumps(result))
    result.pop("trace", None)
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()

"""Kill a worker at random moments of upstream ComfyUI's own evictions, with the REAL
``comfy.model_management`` (ComfyUI 0.30.0, ``--cpu``) and the real bridge; after each, the
ledger must equal the truth: no stand-in of a dead generation, and exactly one stand-in per
model the live worker holds.

Run by test_eviction_ledger.py in a fresh process (upstream's ledger is module state):
``python eviction_ledger.py SEED ITERATIONS`` prints ``RESULT {json}``.

The pack is the real ``IsolatedPack`` (its calls, the telemetry that feeds the bridge, model
commands on the control lane, dropping a dead worker's stand-ins), with a worker on this
interpreter that needs neither ComfyUI nor torch: its models are numpy models registered the
way a pack registers its own modules. A respawn then costs 0.2 s instead of the 4 s of
importing torch and ComfyUI, which is what lets this run many kills.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKER_SIDE = HERE / "worker_side"
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "helpers"), os.environ["COMFYUI_DIR"]]

import comfy.cli_args  # noqa: E402

comfy.cli_args.args.cpu = True
import comfy.model_management as mm  # noqa: E402
import torch  # noqa: E402

from comfy_airlock.host.memory.ledger import LEDGER  # noqa: E402
from comfy_airlock.host.memory.standin import StandIn  # noqa: E402
from comfy_airlock.host.pack import IsolatedPack  # noqa: E402
from comfy_airlock.supervisor import Worker  # noqa: E402
from faults.chaos import Killer, wait_dead  # noqa: E402
from faults.leaks import LeakChecker  # noqa: E402

CPU = torch.device("cpu")
MIB = 1 << 20
MODELS = 6


class FaultPack(IsolatedPack):
    def _spawn(self) -> Worker:
        return Worker(
            sys.executable,
            sys_path=[str(WORKER_SIDE)],
            env={**os.environ, "AIRLOCK_WORKER": "1"},
            name=self.name,
            on_event=self._on_event,
        )


def ledger() -> list[tuple[int, int]]:
    """(generation, model id) of every stand-in in upstream's ledger."""
    return [
        (lm.model.generation, lm.model.model.model_id)
        for lm in mm.current_loaded_models
        if isinstance(lm.model, StandIn)
    ]


def check(pack: FaultPack) -> list[str]:
    """The ledger against the live worker's own registry (read by a call, which also applies
    whatever the bridge had queued, as every node call does)."""
    truth = pack.call("fault_targets:models_report")
    w = pack.worker()
    held = {mid for mid, resident in truth["models"].items() if resident > 0}
    problems = []
    stale = [e for e in ledger() if e[0] != w.generation]
    if stale:
        problems.append(f"stand-ins of dead generations in the ledger: {stale}")
    have = sorted(mid for g, mid in ledger() if g == w.generation)
    if have != sorted(held):
        problems.append(f"ledger holds models {have}, the worker holds {sorted(held)}")
    dangling = [s for s in LEDGER.standins(pack.name) if s.generation != w.generation]
    if dangling:
        problems.append(f"the bridge still tracks stand-ins of dead generations: {dangling}")
    return problems


EVICTIONS = {
    "free_memory(all)": lambda: mm.free_memory(1e30, CPU),
    "unload_all_models()": mm.unload_all_models,
    "free_memory(8 MiB)": lambda: mm.free_memory(mm.get_free_memory(CPU) + 8 * MIB, CPU),
}


def main() -> None:
    seed, n = int(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    pack = FaultPack(
        name="fault-ledger", dir=str(WORKER_SIDE), python=sys.executable, env_dir="", env_key=""
    )
    leaks = LeakChecker()
    failures: list[str] = []
    leaked: list[str] = []
    outcomes: dict[str, int] = {}
    start = time.monotonic()
    for i in range(n):
        try:
            # Fill the ledger up: a new worker has no model, and an eviction may have unloaded
            # whole models (how much free_memory(8 MiB) frees follows the machine's free RAM
            # at that moment: on a busy machine, more).
            missing = MODELS - len(ledger())
            if missing > 0:
                pack.call("fault_targets:make_models", missing, 4, 2 * MIB)
            before = check(pack)
            assert not before, f"before the eviction: {before}"
            assert len(ledger()) == MODELS
            name = rng.choice(sorted(EVICTIONS))
            pid = pack.worker().pid
            killer = Killer(pid, rng.uniform(0, 0.003))
            try:
                EVICTIONS[name]()
            except Exception as e:  # upstream's loop must never see our failures
                failures.append(f"iteration {i}: {name} raised {e!r}")
            killed = killer.finish()
            if killed:
                assert wait_dead(pack.worker(), pid)
            key = f"{name}, {'killed' if killed else 'not killed'}"
            outcomes[key] = outcomes.get(key, 0) + 1
            after = check(pack)
            assert not after, f"after {name} (killed={killed}): {after}"
            leaked += [f"iteration {i}: {p}" for p in leaks.check([pack.worker()])]
        except Exception as e:
            failures.append(f"iteration {i}: {type(e).__name__}: {e}")
    pack.close()
    print(
        "RESULT "
        + json.dumps(
            {
                "iterations": n,
                "failures": failures,
                "leaks": leaked,
                "outcomes": outcomes,
                "seconds": time.monotonic() - start,
            }
        )
    )


if __name__ == "__main__":
    main()

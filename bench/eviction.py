"""Eviction of a worker model through upstream's own ``free_memory``: the time from the call to
the freed bytes showing on the simulated card, beside the same eviction of a model the host
holds itself (the floor: no process boundary), and the arbiter's decision time.

Runs the REAL upstream ``comfy.model_management`` (ComfyUI 0.30.0, ``--cpu``) with the scenario
host of the tests (``tests/comfyui/scenario_host.py``: a simulated card standing for
``cuda:0``, a real worker of tests/packs/memory-pack booking its models on it). The peers are
not measured here (comfy-env 0.4.46 registers stand-ins of its own; a side-by-side row would
drive each through the same upstream ``free_memory``).

    COMFYUI_DIR=... python bench/eviction.py [--reps 20] [--out bench/out/eviction.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("COMFYUI_DIR", str(REPO / ".cache" / "comfyui" / "0.30.0" / "ComfyUI"))
sys.path.insert(0, str(REPO / "tests" / "comfyui"))

import scenario_host as sh  # noqa: E402

from comfy_airlock.host.memory import heartbeat  # noqa: E402

MIB = sh.MIB


def _median_ms(xs: list[float]) -> dict[str, float]:
    ms = sorted(x * 1000 for x in xs)
    return {
        "p50_ms": round(statistics.median(ms), 3),
        "min_ms": round(ms[0], 3),
        "max_ms": round(ms[-1], 3),
    }


def worker_evictions(reps: int) -> list[float]:
    card = sh.new_card("bench-evict", 4096 * MIB)
    pack = sh.load_pack()
    out = []
    for i in range(reps):
        sh.call(pack, "make_model", f"w{i}", 64, "cuda:0", 4)
        pid = pack.worker().pid
        heartbeat.sync()
        before = card.used_by(pid)
        need = card.free() + 64 * MIB  # exactly this model has to go
        t0 = time.perf_counter()
        sh.mm.free_memory(need, sh.CUDA)
        while card.used_by(pid) > before - 64 * MIB:
            time.sleep(0)
        out.append(time.perf_counter() - t0)
        sh.call(pack, "drop_model", f"w{i}")
    sh.close_all()
    sh.mm.current_loaded_models.clear()
    return out


def host_evictions(reps: int) -> list[float]:
    # Host-local models only: the product's device truth (the first card) is not read here.
    card = sh.new_card("bench-local", 4096 * MIB, host_reads=False)
    pid = os.getpid()
    out = []
    for i in range(reps):
        sh.insert_local(sh.LocalModel(card, f"h{i}", [[16 * MIB, True] for _ in range(4)]))
        before = card.used_by(pid)
        need = card.free() + 64 * MIB
        t0 = time.perf_counter()
        sh.mm.free_memory(need, sh.CUDA)
        while card.used_by(pid) > before - 64 * MIB:
            time.sleep(0)
        out.append(time.perf_counter() - t0)
    sh.mm.current_loaded_models.clear()
    return out


def arbiter_plan(n: int = 100, reps: int = 200) -> list[float]:
    from comfy_airlock._native import Arbiter

    cands = [
        {
            "owner": f"pack{i % 4}",
            "generation": 1,
            "model": i,
            "resident": (i % 7 + 1) * 64 * MIB,
            "in_use": i % 11 == 0,
            "last_used": float(i * 37 % 101),
            "owner_idle": i % 4 != 0,
            "owner_is_requester": i % 4 == 1,
            "partial_ok": True,
        }
        for i in range(n)
    ]
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        Arbiter.plan(4096 * MIB, 512 * MIB, cands)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "eviction.json"))
    args = ap.parse_args()
    worker = worker_evictions(args.reps)
    host = host_evictions(args.reps)
    plan = arbiter_plan()
    result = {
        "worker model, 64 MiB, via upstream free_memory": _median_ms(worker),
        "host model, 64 MiB, via upstream free_memory (floor)": _median_ms(host),
        "arbiter plan over 100 models, from Python (incl. reading 100 dicts)": _median_ms(plan),
        "reps": args.reps,
        "load": os.getloadavg(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    for k, v in result.items():
        print(f"{k}: {v}")
    os._exit(0)  # the scenario host's workers are closed; skip torch's slow teardown


if __name__ == "__main__":
    main()

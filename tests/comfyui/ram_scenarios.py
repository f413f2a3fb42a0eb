"""RAM-budget scenarios (host/ram.py, worker/ram.py) against the REAL upstream
``comfy.model_management`` (ComfyUI 0.30.0, ``--cpu``) in this process and in two real workers
of tests/packs/memory-pack.

Run as ``python ram_scenarios.py SCENARIO`` (a fresh process: upstream's state is module
state); prints one JSON object. The simulated part is the GPU edge only: pinning on as upstream
enables it on NVIDIA and page-locking as bookkeeping in the workers (memory-pack fake_pins.py),
and the host's own pinned bytes, which this test sets in the host's ``TOTAL_PINNED_MEMORY`` as
an NVIDIA host's upstream would count its pins (the product only reads it).
"""

from __future__ import annotations

import json
import os
import sys

os.environ["AIRLOCK_HEARTBEAT_S"] = "3600"  # the splits are the scenario's, not the timer's

# First: it puts the ComfyUI tree on the path and imports upstream under --cpu.
from scenario_host import MIB, call, close_all, load_pack, mm  # noqa: I001

import comfy.memory_management

from comfy_airlock.host.memory import ram
from comfy_airlock.host.memory import heartbeat
from comfy_airlock.host.memory.ledger import LEDGER


def snapshot(packs) -> dict:
    """What the host decided and what each worker's ComfyUI holds now."""
    state = {p.name: call(p, "pin_state") for p in packs}
    return {
        "budget": ram.RAM.state["budget"],
        "host_pinned": ram.RAM.state["host_pinned"],
        "ceilings": dict(ram.RAM.ceilings),
        "reported": {p.name: LEDGER.last_report(p.name)["pinned"] for p in packs},
        "rss": {p.name: LEDGER.last_report(p.name)["rss"] for p in packs},
        "workers": state,
        "status": {p.name: {k: p.status()[k] for k in ("pinned", "pin_ceiling")} for p in packs},
    }


def scenario_split():
    """Two workers pin; the host splits the budget; the host's own pins grow past what is
    left, and the worker over its lowered ceiling unregisters down to it; then they shrink."""
    a, b = load_pack("memory-pack"), load_pack("memory-pack-2")
    out = {"upstream_max": [call(a, "pin_setup"), call(b, "pin_setup")]}
    out["registered"] = [call(a, "pin", "A", 48, 6), call(b, "pin", "B", 16, 4)]
    heartbeat.update_ram()
    out["first"] = snapshot([a, b])
    # The host's pins (an NVIDIA host's upstream counting them) leave the workers 40 MiB.
    limit = ram.RAM.state["budget"]
    mm.TOTAL_PINNED_MEMORY = limit - 40 * MIB
    heartbeat.update_ram()
    out["lowered"] = snapshot([a, b])
    heartbeat.update_ram()  # the workers' new reports: nothing moves
    out["settled"] = snapshot([a, b])
    # The executor's headroom for a prompt reaches a worker before its next call.
    comfy.memory_management.set_ram_cache_release_state(None, 3 * 1024 * MIB)
    out["headroom"] = call(a, "pin_state")["headroom"]
    comfy.memory_management.set_ram_cache_release_state(None, 0)
    mm.TOTAL_PINNED_MEMORY = 0
    heartbeat.update_ram()
    out["raised"] = snapshot([a, b])
    out["memory_status"] = _memory_status()
    return out


def _memory_status() -> dict:
    from comfy_airlock.host import loader
    from comfy_airlock.status import render

    s = loader.memory_status()
    return {
        "ram": s.get("ram"),
        "workers": {w["pack"]: w.get("pin_ceiling") for w in s["workers"]},
        "rendered": render(json.loads(json.dumps(s))),
    }


if __name__ == "__main__":
    result = globals()[f"scenario_{sys.argv[1]}"]()
    close_all()
    print("RESULT " + json.dumps(result))

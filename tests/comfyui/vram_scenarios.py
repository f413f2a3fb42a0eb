"""The memory bridge with upstream in a real VRAM state: NORMAL_VRAM, or LOW_VRAM
(``--lowvram``), instead of ``--cpu``'s DISABLED, so that upstream's own partial-load budgets,
``lowvram`` arithmetic and 0.1 sentinel run against the stand-ins.

Run as ``SCENARIO_VRAM=normal|low python vram_scenarios.py SCENARIO SEMANTICS`` (one fresh
process each). The host's torch answers upstream's CUDA queries from the simulated card
(vram_host.py, the GPU edge in this test host only); the workers run ``--cpu`` and book their
models on the card, as in wddm_scenarios.py. A pack's module here is registered on the
simulated ``cuda:0`` (a CPU machine cannot move a tensor to a card; the detection of ``.to()``
is covered under ``--cpu`` in bridge_scenarios.py's ``pack_module``).
"""

from __future__ import annotations

import json
import sys
import threading
import time

from scenario_host import GIB, MIB, call, close_all, mm
from wddm_scenarios import HostModel, host_load, start, worker

from comfy_airlock.host.memory import heartbeat
from comfy_airlock.host.memory.ledger import LEDGER


def _step(out: list, label: str, card, pack, wpid: int, host: HostModel | None = None) -> None:
    """One step's record: what the worker holds, what the ledger says it holds, what the card
    has booked for it, and whether anything is past the card."""
    heartbeat.sync()
    residency = call(pack, "residency")
    out.append(
        {
            "step": label,
            "residency": residency,
            "ledger": {
                s.model.name: s.loaded_size() for s in LEDGER.standins(pack.name) if not s.gone
            },
            "listed": sorted(
                lm.model.model.name
                for lm in mm.current_loaded_models
                if lm.model is not None and lm.model is not host
            ),
            "card_worker": card.used_by(wpid),
            "host": host.loaded_size() if host is not None else 0,
            "overcommitted": card.overcommitted(),
            "demotions": card.demotions_total()["count"],
        }
    )


def _use_asking(pack, name: str) -> list:
    """The pack's node uses ``name`` as loaded once; returns what the worker asked the host
    meanwhile: ``[topic, need, granted]`` each."""
    before = len(call(pack, "asked"))
    call(pack, "use_plain", name)
    return [
        [a["topic"], a["need"], (a.get("answer") or {}).get("granted")]
        for a in call(pack, "asked")[before:]
    ]


def scenario_module_comes_back(semantics: str):
    """A pack's model (4 GiB in 8 parts) on a 16 GiB card; the host loads 13 GiB through
    upstream's ``load_models_gpu``, whose ``free_memory`` evicts the worker's model, and loads
    what its budget allows; the pack's next node uses its model as loaded once: the worker asks
    for it back (``admit?``), the host makes room from its own model through upstream, and the
    model is whole again. The ledger is the card's truth after every step."""
    card = start(semantics)
    pack, wpid = worker("memory-pack")
    steps: list = []
    out = {"vram_state": mm.vram_state.name, "steps": steps}
    call(pack, "make_model", "W", 4096, "cuda:0", 8, True)
    _step(steps, "made", card, pack, wpid)
    host = HostModel(card, "H", 13 * GIB, 26)
    host_load(host)
    _step(steps, "host loaded", card, pack, wpid, host)
    out["asked"] = _use_asking(pack, "W")
    _step(steps, "pack ran", card, pack, wpid, host)
    return out


def scenario_busy_partial(semantics: str):
    """A worker holds A (6 GiB, in use by its running node) and B (4 GiB, idle) on a 16 GiB
    card; the host loads 10 GiB. Upstream's ``free_memory`` may take B but not A (the worker
    refuses: its node uses it), so upstream loads its own model in part, with the budget its
    VRAM state computes from the card: nothing past the card, A untouched, and the ledger the
    card's truth once the node is done."""
    card = start(semantics)
    pack, wpid = worker("memory-pack")
    steps: list = []
    out = {"vram_state": mm.vram_state.name, "steps": steps}
    call(pack, "make_model", "A", 6144, "cuda:0", 12, True)
    call(pack, "make_model", "B", 4096, "cuda:0", 8, True)
    _step(steps, "made", card, pack, wpid)
    node = threading.Thread(target=call, args=(pack, "hold_in_use", "A", 3.0))
    node.start()
    time.sleep(0.8)  # the host hears that A is in use (the worker's report)
    host = HostModel(card, "H", 10 * GIB, 20)
    host_load(host)
    out["during"] = {
        "host": host.loaded_size(),
        "overcommitted": card.overcommitted(),
        "demotions": card.demotions_total()["count"],
    }
    node.join()
    _step(steps, "node done", card, pack, wpid, host)
    return out


def scenario_reserve(semantics: str):
    """``--reserve-vram 2`` (``SCENARIO_RESERVE_GIB=2``), mirrored to the worker, which has
    imported its ComfyUI: upstream keeps its reserve and room to run free for every load. A pack's
    model W (4 GiB in 8 parts) on a 16 GiB card; the host loads 10 GiB, for which upstream's
    ``free_memory`` wants ``1.1 x 10 GiB + max(0.8 GiB + 2 GiB, 2 GiB)`` free and takes part of W
    through its stand-in; the pack's next node uses W as loaded once, and the worker asks for it
    back with the same formula, so the host takes room from its own model through upstream and
    the reserve and room to run stay free after every step."""
    card = start(semantics)
    pack, wpid = worker("memory-pack", comfy=True)
    steps: list = []
    out = {
        "vram_state": mm.vram_state.name,
        "steps": steps,
        "host_minimum": mm.minimum_inference_memory(),
        "free": [],
    }
    call(pack, "make_model", "W", 4096, "cuda:0", 8, True)
    _step(steps, "made", card, pack, wpid)
    out["free"].append(card.free())
    host = HostModel(card, "H", 10 * GIB, 20)
    host_load(host)
    _step(steps, "host loaded", card, pack, wpid, host)
    out["free"].append(card.free())
    out["asked"] = _use_asking(pack, "W")
    _step(steps, "pack ran", card, pack, wpid, host)
    out["free"].append(card.free())
    return out


def scenario_smart_off(semantics: str):
    """``--disable-smart-memory`` (``SCENARIO_SMART=off``): upstream unloads every model it
    does not need on each load, and ``execution.py`` calls ``unload_all_models()`` after each
    prompt. A pack's model W (4 GiB) on a 16 GiB card with room to spare; the host loads 1 GiB:
    W is unloaded whole all the same; the pack's next node gets W back; the prompt ends and
    ``unload_all_models()`` takes W again. The ledger is the card's truth after every step."""
    card = start(semantics)
    pack, wpid = worker("memory-pack")
    steps: list = []
    out = {"vram_state": mm.vram_state.name, "smart_off": mm.DISABLE_SMART_MEMORY, "steps": steps}
    call(pack, "make_model", "W", 4096, "cuda:0", 8, True)
    _step(steps, "made", card, pack, wpid)
    host = HostModel(card, "H", 1 * GIB, 2)
    host_load(host)
    _step(steps, "host loaded", card, pack, wpid, host)
    call(pack, "use_plain", "W")
    _step(steps, "pack ran", card, pack, wpid, host)
    mm.unload_all_models()  # what execution.py does at the end of a prompt with this flag
    _step(steps, "prompt done", card, pack, wpid, host)
    return out


def scenario_sentinel(semantics: str):
    """Under ``--novram`` upstream loads every model with the budget 0.1 (its sentinel for
    "as little as possible"): a host node asking for a worker's partly offloaded model sends
    ``partially_load(0.1)``, which moves nothing, where ``--cpu`` would load it all."""
    card = start(semantics)
    pack, wpid = worker("memory-pack")
    call(pack, "make_model", "X", 1024, "cuda:0", 2, True)
    call(pack, "offload", "X", 512 * MIB)
    heartbeat.sync()
    before = call(pack, "commands")
    standin = next(s for s in LEDGER.standins(pack.name) if s.model.name == "X")
    mm.load_models_gpu([standin])
    new = call(pack, "commands")[len(before) :]
    return {
        "vram_state": mm.vram_state.name,
        "commands": [[c[1], c[2], c[3]] for c in new],
        "residency": call(pack, "residency"),
        "card_worker": card.used_by(wpid),
        "overcommitted": card.overcommitted(),
    }


if __name__ == "__main__":
    result = globals()[f"scenario_{sys.argv[1]}"](*sys.argv[2:])
    close_all()
    print("RESULT " + json.dumps(result))

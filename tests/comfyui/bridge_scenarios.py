"""Memory-bridge scenarios against the REAL upstream ``comfy.model_management`` (ComfyUI 0.30.0,
``--cpu``), a real worker (tests/packs/memory-pack) and the simulated GPU.

Run as ``python bridge_scenarios.py SCENARIO``, one fresh process per scenario (upstream's ledger
is module state); prints one JSON object. The simulated card stands for ``cuda:0``: the host's
``get_free_memory(cuda:0)`` reads it (the test-only hook in scenario_host.py; the product never
patches the host), and the worker books its models' residency on it.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import torch
from scenario_host import (  # imports upstream under --cpu and installs the host hook
    CARD,
    CUDA,
    MIB,
    TMP,
    LocalModel,
    call,
    close_all,
    insert_local,
    ledger,
    load_pack,
    mm,
    names,
    new_card,
)

from comfy_airlock.device import SimGpu
from comfy_airlock.host.memory.ledger import LEDGER

# 4 GiB: room for upstream's own inference reserve (about 1.2 GiB), so only what a scenario asks
# for is evicted.
SIM = new_card("card", 4096 * MIB, "device_wide")


# --- scenarios ------------------------------------------------------------------------------

ORDER_MODELS = [
    ("A", 8, 4, 0),
    ("B", 12, 4, 1),
    ("C", 16, 4, 0),
    ("D", 8, 4, 0),
]  # name, MiB, parts, offloaded parts


def scenario_order():
    """free_memory walks worker stand-ins in upstream's order and stops at the minimum; the same
    sizes held in-process are evicted identically."""
    pack = load_pack()
    for name, mib, parts, off in ORDER_MODELS:
        call(pack, "make_model", name, mib, "cuda:0", parts)
        if off:
            call(pack, "offload", name, off * mib * MIB // parts)
    ours_before = ledger()
    need = CARD[0].free() + 17 * MIB
    ours = names(mm.free_memory(need, CUDA))
    worker_after = call(pack, "residency")
    ours_used = CARD[0].used()
    # The reference: the same models, in-process, on a card in the same state.
    mm.current_loaded_models.clear()
    pack.close()
    ref_card = SimGpu.create(str(TMP / "ref"), 4096 * MIB, "ref", semantics="device_wide")
    CARD[0] = ref_card
    for name, mib, parts, off in ORDER_MODELS:
        per = mib * MIB // parts
        insert_local(LocalModel(ref_card, name, [[per, i >= off] for i in range(parts)]))
    ref_before = ledger()
    ref = names(mm.free_memory(ref_card.free() + 17 * MIB, CUDA))
    return {
        "ours_before": ours_before,
        "ours": ours,
        "ref_before": ref_before,
        "ref": ref,
        "worker_after": worker_after,
        "used_after": ours_used,
        "ref_used_after": ref_card.used(),
    }


def scenario_partial():
    """A partial unload that frees enough keeps the entry; one that falls short (the model is in
    use by a running node) escalates to a detach, and the popped model comes back at the next
    report because the worker still holds it."""
    pack = load_pack()
    call(pack, "make_model", "A", 16, "cuda:0", 4)
    out = {}
    unloaded = mm.free_memory(CARD[0].free() + 4 * MIB, CUDA)
    out["partial_unloaded"] = names(unloaded)
    out["partial_ledger"] = ledger()
    out["partial_resident"] = call(pack, "residency")["A"]
    out["standin_loaded"] = [s.loaded_size() for s in LEDGER.standins("memory-pack")]
    # In use: the node holding it runs on another thread; the control lane still answers.
    call(pack, "make_model", "B", 8, "cuda:0", 4)
    b = next(s for s in LEDGER.standins("memory-pack") if s.model.name == "B")
    t = threading.Thread(target=call, args=(pack, "hold_in_use", "A", 2.0))
    t.start()
    time.sleep(0.8)
    # While that node runs: a model it does not use is evictable...
    out["idle_freed_while_busy"] = b.partially_unload(torch.device("cpu"), 2 * MIB)
    out["idle_loaded_while_busy"] = b.loaded_size()
    # ...and the one it uses is not (upstream walks only A: B is in keep_loaded).
    keep = [lm for lm in mm.current_loaded_models if lm.model is b]
    unloaded = mm.free_memory(CARD[0].free() + 4 * MIB, CUDA, keep_loaded=keep)
    out["busy_unloaded"] = names(unloaded)
    out["busy_ledger"] = ledger()
    # An idle worker's report comes from its control thread, Python busy or not.
    out["heartbeat_names"] = sorted(r["name"] for r in pack.last_report()[1]["models"])
    t.join()
    out["after_report_ledger"] = ledger()
    out["busy_resident"] = call(pack, "residency")["A"]
    return out


def scenario_rerequest():
    """load_models_gpu on a stand-in that loaded_models() returned: upstream detaches it with
    unpatch_all=False and asks it to load; nothing moves in the worker."""
    pack = load_pack()
    call(pack, "make_model", "A", 8, "cuda:0", 4)
    call(pack, "make_model", "B", 8, "cuda:0", 4)
    before = call(pack, "commands")
    standin = next(p for p in mm.loaded_models() if p.model.name == "A")
    mm.load_models_gpu([standin])
    return {
        "ledger": ledger(),
        "commands_before": before,
        "commands_after": call(pack, "commands"),
        "residency": call(pack, "residency"),
    }


def scenario_currently_used():
    """Seed row 38, with upstream's own pattern (``comfy/controlnet.py``, the model-patch
    nodes): ``loaded_models(only_currently_used=True)`` before an encode, then
    ``load_models_gpu`` of what it returned. A partly offloaded worker model must not be in
    that list, so nothing loads it back; the host's own model, loaded just before, is."""
    pack = load_pack()
    call(pack, "make_model", "A", 16, "cuda:0", 4)
    call(pack, "offload", "A", 12 * MIB)
    host = LocalModel(CARD[0], "H", [[4 * MIB, True]])
    insert_local(host)
    before = call(pack, "commands")
    used = mm.loaded_models(only_currently_used=True)
    mm.load_models_gpu(used)
    return {
        "used": [getattr(p.model, "name", None) for p in used],
        "all": sorted(getattr(p.model, "name", "?") for p in mm.loaded_models()),
        "flags": {
            getattr(lm.model.model, "name", "?"): lm.currently_used
            for lm in mm.current_loaded_models
        },
        "commands_before": before,
        "commands_after": call(pack, "commands"),
        "residency": call(pack, "residency"),
    }


def _held():
    """Upstream's list as (name, loaded bytes, device), index 0 first."""
    return [
        [lm.model.model.name, lm.model.loaded_size(), str(lm.device)]
        for lm in mm.current_loaded_models
        if lm.model is not None
    ]


def scenario_pack_module():
    """A pack's own network, never registered: moved onto ComfyUI's device (``cpu`` under
    ``--cpu``) with ``.to()`` it is a worker model with a stand-in; the Free button
    (``unload_all_models``) evicts it; the pack's next node, using it as loaded once, gets it
    back and the ledger follows; so does the pack's own ``.to()``; it leaves with the pack's
    last reference. ``.half().to()``, ``load_state_dict`` into a module built on the device,
    and a submodule moved before its parent, each make one model; a ComfyUI model is counted
    once, as a patcher."""
    pack = load_pack()
    out = {"device": call(pack, "own.make", "N", 8, "to")}
    out["made"] = _held()
    mm.unload_all_models()
    out["freed"] = _held()
    out["worker_freed"] = call(pack, "own.rows")
    out["ran"] = call(pack, "own.run", "N")
    out["after_run"] = _held()
    mm.unload_all_models()
    call(pack, "own.move", "N")
    out["after_move"] = _held()
    call(pack, "own.drop", "N")
    out["after_drop"] = _held()
    for how in ("half_to", "state_dict"):
        call(pack, "own.make", how, 8, how)
        out[how] = call(pack, "own.rows")
        call(pack, "own.drop", how)
    call(pack, "own.submodule_then_whole", "W", 8)
    out["submodule_then_whole"] = call(pack, "own.rows")
    call(pack, "own.drop", "W")
    call(pack, "load_patcher", "P", 4)
    out["patcher"] = call(pack, "own.rows")
    return out


def scenario_comes_back():
    """A registered model the host evicted, used by the pack's next node as loaded once (no
    ``using()``): the worker asks the host to admit its bytes back on the simulated card, loads
    it, and the ledger equals the card."""
    pack = load_pack()
    call(pack, "make_model", "A", 16, "cuda:0", 4)
    call(pack, "make_model", "B", 8, "cuda:0", 4)
    pid = pack.worker().pid
    out = {"evicted": names(mm.free_memory(CARD[0].free() + 20 * MIB, CUDA))}
    out["residency_evicted"] = call(pack, "residency")
    before = len(call(pack, "asked"))
    call(pack, "use_plain", "A")
    out["asked"] = [
        [a["topic"], a["device"], a["need"], (a.get("answer") or {}).get("granted")]
        for a in call(pack, "asked")[before:]
    ]
    out["residency"] = call(pack, "residency")
    out["ledger"] = {s.model.name: s.loaded_size() for s in LEDGER.standins("memory-pack")}
    out["listed"] = sorted(ledger())
    out["card"] = CARD[0].used_by(pid)
    return out


def scenario_unload_all():
    """unload_all_models (the Free button, POST /free, --disable-smart-memory, the OOM branch)
    releases worker models. Under --cpu upstream walks only cpu, so the test points its device
    list at the simulated cuda:0, as on a GPU machine."""
    pack = load_pack()
    call(pack, "make_model", "A", 8, "cuda:0", 4)
    call(pack, "make_model", "B", 16, "cuda:0", 4)
    used_before = CARD[0].used()
    mm.get_all_torch_devices = lambda exclude_current=False: [CUDA]
    mm.unload_all_models()
    return {
        "used_before": used_before,
        "used_after": CARD[0].used(),
        "ledger": ledger(),
        "residency": call(pack, "residency"),
    }


def scenario_patcher():
    """A model the pack loaded through the worker's own load_models_gpu (a real ModelPatcher,
    on the CPU as under --cpu) is in the host's ledger on cpu, and the host's
    unload_all_models() unloads it with the worker's own upstream code."""
    pack = load_pack()
    loaded = call(pack, "load_patcher", "P", 4)
    out = {"loaded": loaded, "worker_before": call(pack, "worker_ledger")}
    out["host_before"] = [
        [str(lm.device), lm.model.model.name, lm.model.loaded_size()]
        for lm in mm.current_loaded_models
    ]
    mm.unload_all_models()  # under --cpu it walks the cpu device
    out["host_after"] = ledger()
    out["worker_after"] = call(pack, "worker_ledger")
    out["host_after_report"] = ledger()
    return out


def scenario_pack_unload_all():
    """A node of the pack calls unload_all_models() in its worker, as "purge VRAM" nodes do:
    natively that empties ComfyUI's whole ledger. Here ComfyUI holds a model of its own (a real
    ModelPatcher loaded by upstream's load_models_gpu, on the CPU as under --cpu) and the
    worker one through its own load_models_gpu (a stand-in in ComfyUI's ledger)."""
    import comfy.model_patcher

    pack = load_pack()
    call(pack, "load_patcher", "P", 4)
    cpu = torch.device("cpu")
    net = torch.nn.Linear(1024, 1024, bias=False)
    host = comfy.model_patcher.ModelPatcher(net, load_device=cpu, offload_device=cpu)
    mm.load_models_gpu([host])

    def kinds():
        return sorted(type(lm.model).__name__ for lm in mm.current_loaded_models if lm.model)

    out = {"host_before": kinds(), "worker_before": call(pack, "worker_ledger")}
    out["worker_in_call"] = call(pack, "purge")
    out["host_after"] = kinds()
    out["worker_after"] = call(pack, "worker_ledger")
    out["host_patcher_loaded"] = int(host.loaded_size())
    return out


def scenario_killed():
    """A worker killed with SIGKILL: upstream's walk over its stand-ins raises nothing and frees
    nothing there; its stand-ins leave the ledger; a stale stand-in never reaches the respawned
    worker's models."""
    pack = load_pack()
    call(pack, "make_model", "A", 8, "cuda:0", 4)
    old = LEDGER.standins("memory-pack")[0]
    gen = pack._worker.generation
    pack._worker.kill()
    time.sleep(0.3)
    error = None
    try:
        unloaded = names(mm.free_memory(CARD[0].free() + 64 * MIB, CUDA))
    except Exception as e:  # must not happen
        error = repr(e)
        unloaded = None
    # The respawned worker (next call) gets a model with the same id.
    call(pack, "make_model", "A2", 8, "cuda:0", 4)
    new_gen = pack._worker.generation
    old.detach(True)  # a stale command: refused, never sent
    return {
        "error": error,
        "unloaded": unloaded,
        "generations": [gen, new_gen],
        "ledger": ledger(),
        "residency": call(pack, "residency"),
        "ledger_generations": sorted({s.generation for s in LEDGER.standins()}),
    }


if __name__ == "__main__":
    result = globals()[f"scenario_{sys.argv[1]}"]()
    close_all()
    print("RESULT " + json.dumps(result))

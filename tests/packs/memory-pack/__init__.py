"""Test pack for the memory bridge: models of chosen sizes, registered with comfy-airlock so
that the host's ComfyUI sees (and can evict) them, or loaded through the worker's own
``load_models_gpu`` (fake patchers booking on the simulated card, tests/comfyui/wddm_scenarios.py).
Driven by tests/comfyui/bridge_scenarios.py and wddm_scenarios.py through worker calls; it has
one node too, so that it loads like any pack."""

import os

import torch

import comfy_airlock

from . import own, recorder  # noqa: F401 (own: called as memory-pack:own.<fn>)

recorder.install()

MODELS = {}


class Weights(torch.nn.Module):
    """Parameters a node computes with (``use_plain``)."""

    def forward(self, x):
        real = [p for p in self.parameters() if p.numel() and p.device.type != "meta"]
        return x + sum(float(p.flatten()[:1].sum()) for p in real)


def make_model(name, mib, device="cuda:0", chunks=4, meta=False):
    """A module of ``mib`` MiB in ``chunks`` parameters, registered as resident on ``device``
    (on the simulated GPU the bytes stay in RAM and their residency is booked on the card;
    ``meta``: no bytes at all, for models of many GiB)."""
    per = mib * 1024 * 1024 // chunks // 4
    module = Weights()
    for i in range(chunks):
        data = torch.empty(per, device="meta") if meta else torch.zeros(per)
        module.register_parameter(f"p{i}", torch.nn.Parameter(data, requires_grad=False))
    MODELS[name] = module
    return comfy_airlock.register_model(module, name=name, device=device)


PATCHERS = {}


def load_patcher(name, mib):
    """A model loaded the ComfyUI way, through the worker's own load_models_gpu (on the CPU
    here, as under --cpu): the bridge finds it in the worker's current_loaded_models."""
    import comfy.model_management
    import comfy.model_patcher

    net = torch.nn.Linear(mib * 1024 * 1024 // 4 // 1024, 1024, bias=False)
    cpu = torch.device("cpu")
    patcher = comfy.model_patcher.ModelPatcher(net, load_device=cpu, offload_device=cpu)
    PATCHERS[name] = patcher
    comfy.model_management.load_models_gpu([patcher])
    return int(patcher.loaded_size())


def purge():
    """What "purge VRAM" nodes do (Easy-Use, LayerStyle, LLM nodes making room): ComfyUI's
    unload_all_models(), from inside a node; returns the worker's ledger after it."""
    import comfy.model_management

    comfy.model_management.unload_all_models()
    return worker_ledger()


def worker_ledger():
    """The worker's own ComfyUI ledger: (class name, loaded bytes) per entry."""
    import comfy.model_management

    return [
        [type(lm.model.model).__name__, int(lm.model.loaded_size())]
        for lm in comfy.model_management.current_loaded_models
        if lm.model is not None
    ]


def drop_model(name):
    module = MODELS.pop(name)
    comfy_airlock.unregister_model(module)


def hold_in_use(name, seconds):
    """Uses a model for ``seconds`` (a node that is running with it)."""
    import time

    from comfy_airlock.worker import models

    with models.using(MODELS[name]):
        time.sleep(seconds)
    return True


def offload(name, nbytes):
    """Offloads part of a model (as a pack that streams weights would), before any command."""
    from comfy_airlock.worker import models

    mid = models._ID_OF[MODELS[name]]
    models.execute(mid, "partially_unload", float(nbytes))
    return True


def commands():
    """The model commands this worker has run: (model, op, arg, bytes)."""
    return [list(c) for c in recorder.COMMANDS]


FAKES = {}


def load_fake(name, mib, parts=4):
    """Loads a new fake patcher of ``mib`` MiB through this worker's own ``load_models_gpu``
    (which asks the host for admission first); returns its resident bytes."""
    from . import fake_patcher, sim_free

    sim_free.install()
    FAKES[name] = fake_patcher.FakePatcher(name, mib * 1024 * 1024, parts)
    return use_fake(name)


def use_fake(name):
    """A node using a fake patcher again: ``load_models_gpu`` loads back what was evicted."""
    import comfy.model_management

    from . import sim_free

    sim_free.install()
    p = FAKES[name]
    comfy.model_management.load_models_gpu([p])
    return p.loaded_size()


def load_fake_contended(name, mib, parts, grab_pid, grab_mib):
    """``load_fake`` where another process (``grab_pid``) takes ``grab_mib`` MiB of the card
    between the host's admission and the load: the load runs out of memory, the worker asks
    the host for room again and retries once."""
    from . import fake_patcher, sim_free

    sim_free.install()
    p = fake_patcher.FakePatcher(name, mib * 1024 * 1024, parts)
    p.grab_first = (grab_pid, grab_mib * 1024 * 1024)
    FAKES[name] = p
    return use_fake(name)


def fakes():
    """Resident bytes of each fake patcher."""
    return {n: p.loaded_size() for n, p in FAKES.items()}


# --- the stress test (tests/comfyui/stress_scenario.py): one node per call ----------------------


def _answers_since(mark):
    """What this worker asked the host since ``mark`` (the last entry before the node ran):
    topic and the host's ``granted`` (True, False, or None for no answer)."""
    out = []
    for a in reversed(recorder.ASKED):
        if a is mark:
            break
        out.append({"topic": a["topic"], "granted": (a.get("answer") or {}).get("granted")})
    return out[::-1]


def _node(body):
    from . import sim_free

    sim_free.install()
    mark = recorder.ASKED[-1] if recorder.ASKED else None
    resident = body()
    held = {n: p.loaded_size() for n, p in FAKES.items()}  # what its report says, as it ends
    return {"resident": resident, "asked": _answers_since(mark), "held": held}


def stress_load(name, mib, parts, hold_s=0.0):
    """A node loading model ``name`` (new: ``mib`` MiB in ``parts``; else the one it has)
    through this worker's ``load_models_gpu``, then computing with it for ``hold_s`` seconds."""
    from . import fake_patcher

    def body():
        import time

        import comfy.model_management

        if name not in FAKES:
            if not mib:
                raise KeyError(f"this worker has no model {name!r}")
            FAKES[name] = fake_patcher.FakePatcher(name, mib * 1024 * 1024, parts)
        comfy.model_management.load_models_gpu([FAKES[name]])
        time.sleep(hold_s)
        return FAKES[name].loaded_size()

    return _node(body)


def stress_pair(held, name, mib, parts):
    """A node that uses ``held`` and, with it still in use, loads ``name`` (new when ``mib``):
    the host's admission for the second load must not take the first away."""
    from . import fake_patcher

    def body():
        import comfy.model_management

        comfy.model_management.load_models_gpu([FAKES[held]])
        if name not in FAKES:
            if not mib:
                raise KeyError(f"this worker has no model {name!r}")
            FAKES[name] = fake_patcher.FakePatcher(name, mib * 1024 * 1024, parts)
        comfy.model_management.load_models_gpu([FAKES[name]])
        return FAKES[name].loaded_size()

    return _node(body)


def drop_fake(name):
    """The pack lets go of a model, as a node dropping its last reference does: its weights
    leave the card with the object, and upstream's finalizer (``cleanup_models``) takes its
    entry out of this worker's ledger."""
    FAKES.pop(name).detach(True)  # a fake's weights are bookings: released with it
    return True


def stress_state():
    """Each fake patcher's resident bytes and whether this worker's own ledger lists it (a
    resident model it does not list is invisible to the host); the card's bookings of this
    process."""
    import comfy.model_management as mm

    from comfy_airlock.device import SimGpu

    listed = {id(lm.model) for lm in mm.current_loaded_models if lm.model is not None}
    return {
        "pid": os.getpid(),
        "fakes": {n: p.loaded_size() for n, p in FAKES.items()},
        "listed": {n: id(p) in listed for n, p in FAKES.items()},
        "booked": SimGpu.from_env().used_by(os.getpid()),
    }


def asked():
    """The admissions and OOM retries this worker asked the host for."""
    return list(recorder.ASKED)


def setup_sim(comfy=False):
    """This worker starts on the simulated card (its CUDA context: on WDDM a re-partition for
    every other process); returns its pid. ``comfy``: it will load models through its own
    ComfyUI, which reads the card from now on (imported now, so that the next call's loads go
    through comfy-airlock's admission)."""
    from comfy_airlock.device import SimGpu

    if comfy:
        from . import sim_free

        sim_free.install()
    SimGpu.from_env().attach(os.getpid())
    return os.getpid()


def hold_in_use_until(name, flag, timeout):
    """A node running with a registered model until the file ``flag`` exists (at most
    ``timeout`` seconds); the host hears at once that the model is in use."""
    import time

    from comfy_airlock.worker import models

    deadline = time.monotonic() + timeout
    with models.using(MODELS[name]):
        models.publish()
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.02)
    return os.path.exists(flag)


def use_plain(name):
    """A node computing with a registered model as loaded once, without ``using()``: if the
    host evicted it, the worker puts it back first (worker/modules.py)."""
    return float(MODELS[name](torch.zeros(1)))


def residency():
    from comfy_airlock.worker import models

    return {r["name"]: r["resident"] for r in models.report()["models"]}


class MemoryPackNode:
    CATEGORY = "airlock tests"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "name": ("STRING", {"default": "m"}),
                "mib": ("INT", {"default": 4}),
                "device": (["cpu", "cuda:0"],),
            }
        }

    def run(self, name, mib, device):
        if name not in MODELS:
            make_model(name, mib, device)
        from comfy_airlock.worker import models

        with models.using(MODELS[name]):  # the node "runs" its model
            pass
        return (str(residency()),)


class MemoryPackOOM:
    """Holds a model, then runs out of memory: ComfyUI's OOM branch must reach the model."""

    CATEGORY = "airlock tests"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {"name": ("STRING", {"default": "oom"}), "mib": ("INT", {"default": 2})}
        }

    def run(self, name, mib):
        if name not in MODELS:
            make_model(name, mib, "cpu")
        from comfy_airlock.worker import models

        with models.using(MODELS[name]):
            pass
        raise torch.cuda.OutOfMemoryError(f"simulated: no room for {name} in the worker")


NODE_CLASS_MAPPINGS = {"MemoryPackNode": MemoryPackNode, "MemoryPackOOM": MemoryPackOOM}


PINNED = {}


def pin_setup():
    """Pinning on, as upstream enables it on an NVIDIA machine (fake_pins.py: the simulated GPU
    edge); returns upstream's ceiling. Call it before anything else imports ComfyUI here."""
    from . import fake_pins

    return fake_pins.enable()


def pin(name, mib, parts=4):
    """A model with ``mib`` MiB of host RAM registered as pinned through upstream's budget,
    in this worker's own ``current_loaded_models``; returns the bytes registered."""
    import comfy.model_management as mm

    from . import fake_pins

    p = fake_pins.PinnedModel(name, mib * 1024 * 1024, parts)
    PINNED[name] = p
    mm.current_loaded_models.append(mm.LoadedModel(p))
    return p.register()


def pin_state():
    """This worker's ComfyUI pin state: its ceiling, registered total, cache headroom, and
    what each pinned model still holds."""
    import comfy.memory_management
    import comfy.model_management as mm

    return {
        "max": int(mm.MAX_PINNED_MEMORY),
        "total": int(mm.TOTAL_PINNED_MEMORY),
        "headroom": int(comfy.memory_management.RAM_CACHE_HEADROOM),
        "models": {n: p.pinned() for n, p in PINNED.items()},
    }


def book_context(mib):
    """This worker's CUDA context, as a real one occupies the card: ``mib`` booked under its
    own tag, which no model of the worker accounts for (the worker's floor)."""
    from comfy_airlock.device import SimGpu

    SimGpu.from_env().book(os.getpid(), "cuda-context", mib * 1024 * 1024)
    return os.getpid()


def report():
    """What this worker reports to the host now (worker/models.py)."""
    from comfy_airlock.worker import models

    return models.report()


def load_fakes(specs):
    """One node loading several new fake patchers in turn (``[name, mib, parts]`` each), each
    through this worker's own ``load_models_gpu``; returns their resident bytes."""
    return [load_fake(name, mib, parts) for name, mib, parts in specs]


def comfy_imported():
    """Whether this worker has imported ComfyUI's model management yet."""
    import sys

    return "comfy.model_management" in sys.modules

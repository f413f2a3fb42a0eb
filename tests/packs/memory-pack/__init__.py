"""Test pack for the memory bridge: models of chosen sizes, registered with comfy-airlock so
that the host's ComfyUI sees (and can evict) them. Driven by tests/comfyui/bridge_scenarios.py
through worker calls; it has one node too, so that it loads like any pack."""

import torch

import comfy_airlock

MODELS = {}


def make_model(name, mib, device="cuda:0", chunks=4):
    """A module of ``mib`` MiB in ``chunks`` parameters, registered as resident on ``device``
    (on the simulated GPU the bytes stay in RAM and their residency is booked on the card)."""
    per = mib * 1024 * 1024 // chunks // 4
    module = torch.nn.Module()
    for i in range(chunks):
        module.register_parameter(
            f"p{i}", torch.nn.Parameter(torch.zeros(per), requires_grad=False)
        )
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
    from comfy_airlock.worker import models

    return [list(c) for c in models.COMMANDS]


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

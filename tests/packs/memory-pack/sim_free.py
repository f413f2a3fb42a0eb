"""The worker's free-memory reading for the fake ``cuda:0``: the simulated card's.

Test-only, and it lives in this test pack, never in comfy-airlock: on a GPU machine the
worker's own upstream ``get_free_memory`` reads ``torch.cuda.mem_get_info``; here (``--cpu``,
the card simulated by ``AIRLOCK_SIM_GPU``) it answers what this process would read on the card,
``free_seen_by(os.getpid())``: the device's free memory on device-wide semantics, this process's
blind budget on WDDM. A pack may patch its own worker's ComfyUI; the host's is never touched.
"""

import os

_STATE = {"installed": False}


def install():
    """Points this worker's ``comfy.model_management.get_free_memory`` at the simulated card for
    CUDA devices (idempotent; a no-op without ``AIRLOCK_SIM_GPU``)."""
    path = os.environ.get("AIRLOCK_SIM_GPU")
    if _STATE["installed"] or not path:
        return
    import comfy.model_management as mm

    from comfy_airlock.device import SimGpu

    card = SimGpu.open(path.split(os.pathsep)[0])
    original = mm.get_free_memory

    def get_free_memory(dev=None, torch_free_too=False):
        if dev is not None and getattr(dev, "type", None) == "cuda":
            free = card.free_seen_by(os.getpid())
            return (free, 0) if torch_free_too else free
        return original(dev, torch_free_too)

    mm.get_free_memory = get_free_memory
    _STATE["installed"] = True

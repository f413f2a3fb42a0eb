"""A pack's own networks, held the way real packs hold theirs (a model class built once, moved
onto ComfyUI's device with ``.to()``, called in later nodes), never registered with
comfy-airlock: the worker must see them itself (worker/owned.py). Called by
tests/comfyui/bridge_scenarios.py as ``own.<function>``."""

import gc

import torch

OWN = {}


class Block(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(n), requires_grad=False)

    def forward(self, x):
        return x + self.w[:1].sum()


class OwnNet(torch.nn.Module):
    """``mib`` MiB of float32 weights in ``chunks`` blocks."""

    def __init__(self, mib, chunks=4):
        super().__init__()
        per = mib * 1024 * 1024 // chunks // 4
        self.blocks = torch.nn.ModuleList(Block(per) for _ in range(chunks))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def _device():
    import comfy.model_management

    return comfy.model_management.get_torch_device()


def make(name, mib, how="to"):
    """Builds a network and puts it on ComfyUI's device: ``to`` (``OwnNet(...).to(dev)``),
    ``half_to`` (``.half().to(dev)``, as fp16 packs do), ``state_dict`` (built on the device,
    then weights loaded into it). Returns ComfyUI's device as the pack saw it."""
    dev = _device()
    if how == "to":
        OWN[name] = OwnNet(mib).to(dev)
    elif how == "half_to":
        OWN[name] = OwnNet(mib).half().to(dev)
    elif how == "state_dict":
        weights = OwnNet(mib).state_dict()
        with torch.device(dev):
            net = OwnNet(mib)
        net.load_state_dict(weights)
        OWN[name] = net
    else:
        raise ValueError(how)
    return str(dev)


def run(name):
    """A later node using the network as loaded once, without moving it."""
    return float(OWN[name](torch.zeros(1)))


def move(name):
    OWN[name].to(_device())
    return True


def submodule_then_whole(name, mib):
    """``net.blocks[0].to(dev)`` first, then ``net.to(dev)``: one model, not two."""
    net = OwnNet(mib)
    net.blocks[0].to(_device())
    net.to(_device())
    OWN[name] = net
    return True


def drop(name):
    del OWN[name]
    gc.collect()
    return True


def rows():
    """The worker's report: (name, kind, resident) per model."""
    from comfy_airlock.worker import models

    return [[r["name"], r["kind"], r["resident"]] for r in models.report()["models"]]


def run_on_device(name):
    """A later node using the network as loaded once, its input on ComfyUI's device as a real
    node puts it (``run`` computes on a CPU input: the ``--cpu`` scenarios)."""
    return float(OWN[name](torch.zeros(1, device=_device())))

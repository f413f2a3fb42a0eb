"""A model the worker loads the ComfyUI way (its own ``load_models_gpu``), whose weights are
bookings on the simulated card instead of tensors.

It has the patcher surface upstream's memory manager uses (the same members as the host's
stand-in, see tests/comfyui/test_drift_canary.py) and obeys its arguments: ``partially_load``
loads parts up to the budget (``1e32``: all), ``partially_unload`` unloads parts until the
bytes asked are free and returns what it freed, ``detach(True)`` unloads everything,
``detach(False)`` moves nothing. Residency is in parts, as a real patcher's is in modules, so an
eviction frees whole parts.
"""

import os

import torch

from comfy_airlock.device import SimGpu


def _card():
    return SimGpu.open(os.environ["AIRLOCK_SIM_GPU"].split(os.pathsep)[0])


def _booked(name):
    tag, me = f"patcher-{name}", os.getpid()
    return sum(n for pid, t, n in _card().bookings() if t == tag and pid == me)


class FakePatcher:
    def __init__(self, name, nbytes, parts=4, device="cuda:0"):
        per = nbytes // parts
        self.name = name
        self.parts = [[per, False] for _ in range(parts)]
        self.parts[-1][0] += nbytes - per * parts
        # What upstream weak-references as the real model; its class name is the report's name.
        self.model = type(name, (), {})()
        self.load_device = torch.device(device)
        self.offload_device = torch.device("cpu")
        self.parent = None
        self.clone_base_uuid = object()
        # (pid, bytes): at the first load, another process takes this much of the card between
        # the host's admission and the load, which then runs out of memory, as CUDA would.
        self.grab_first: tuple[int, int] | None = None

    def _book(self):
        _card().book(os.getpid(), f"patcher-{self.name}", self.loaded_size())

    def model_size(self):
        return sum(b for b, _ in self.parts)

    def loaded_size(self):
        return sum(b for b, r in self.parts if r)

    def current_loaded_device(self):
        return self.load_device if self.loaded_size() else self.offload_device

    def model_dtype(self):
        return None

    def model_patches_to(self, device):
        pass

    def model_patches_models(self):
        return []

    def get_nested_additional_models(self):
        return []

    def is_dynamic(self):
        return False

    def is_clone(self, other):
        return getattr(other, "model", None) is self.model

    def lowvram_patch_counter(self):
        return 0

    def loaded_ram_size(self):
        return 0

    def partially_unload_ram(self, ram_to_free, subsets=None):
        return 0

    def partially_load(self, device, extra_memory, force_patch_weights=False):
        if self.grab_first is not None:
            pid, nbytes = self.grab_first
            self.grab_first = None
            _card().book(pid, "grabbed-after-admission", nbytes)
        loaded = 0
        for p in self.parts:
            if not p[1] and loaded + p[0] <= extra_memory:
                p[1] = True
                loaded += p[0]
        growth = self.loaded_size() - _booked(self.name)
        if growth > _card().free():
            # As a CUDA allocation would: nothing of this load stays.
            for p in self.parts:
                p[1] = False
            self._book()
            raise torch.OutOfMemoryError(f"simulated: no room on the card for {self.name}")
        self._book()
        return loaded

    def partially_unload(self, device_to, memory_to_free=0, force_patch_weights=False):
        freed = 0
        for p in self.parts:
            if freed >= memory_to_free:
                break
            if p[1]:
                p[1] = False
                freed += p[0]
        self._book()
        return freed

    def detach(self, unpatch_all=True):
        if unpatch_all:
            for p in self.parts:
                p[1] = False
            self._book()

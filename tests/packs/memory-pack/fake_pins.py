"""Pinned host RAM in a worker, where page-locking itself is simulated (the GPU edge).

On a CPU-only machine upstream leaves pinning off (``MAX_PINNED_MEMORY = -1``: no NVIDIA/AMD
device) and ``cudaHostRegister`` does not exist. Two things stand in for an NVIDIA machine here,
and nothing else:

- :func:`enable` sets the worker's ``MAX_PINNED_MEMORY`` to the value upstream computes at
  import on NVIDIA Linux (``0.9 * get_total_memory(cpu)``), before comfy-airlock first reads it;
- :class:`PinnedModel` registers its buffers (real CPU tensors: the RAM is real) by adding their
  size to upstream's ``TOTAL_PINNED_MEMORY`` instead of calling ``cudaHostRegister``, after
  asking upstream's own ``ensure_pin_registerable`` as ``comfy/pinned_memory.py`` does.

Everything that decides and frees is upstream's real code in the worker: the
``MAX_PINNED_MEMORY`` check, ``registration_eviction_tiers`` and ``free_model_pins`` walking
``current_loaded_models`` through ``models_for_pin_eviction``, which call
:meth:`PinnedModel.unregister_inactive_pins` as they call a ``ModelPatcherDynamic``'s.
"""

import torch

CPU = torch.device("cpu")


def enable():
    """Pinning as upstream enables it on NVIDIA Linux; returns the ceiling it computes."""
    import comfy.model_management as mm

    mm.MAX_PINNED_MEMORY = mm.get_total_memory(CPU) * 0.90
    return int(mm.MAX_PINNED_MEMORY)


class PinnedModel:
    """A dynamic model as upstream's pin ladder sees one: ``is_dynamic()``, and
    ``model.dynamic_pins[load_device]`` with its ``active``/``current_prompt`` flags. Its pins
    are a stack, unregistered newest first (as ``unregister_inactive_pins`` walks its stack)."""

    def __init__(self, name, nbytes, parts):
        per = nbytes // parts
        self.buffers = [torch.ones(per, dtype=torch.uint8) for _ in range(parts)]
        self.registered = [False] * parts
        self.model = type(name, (), {})()
        self.model.dynamic_pins = {CPU: {"active": False, "current_prompt": False}}
        self.load_device = CPU
        self.offload_device = CPU
        self.parent = None

    def register(self):
        """Registers every buffer upstream's budget admits; returns the bytes registered."""
        import comfy.model_management as mm

        done = 0
        for i, buf in enumerate(self.buffers):
            if self.registered[i]:
                continue
            if not mm.ensure_pin_registerable(buf.nbytes):
                break
            self.registered[i] = True
            mm.TOTAL_PINNED_MEMORY += buf.nbytes  # cudaHostRegister succeeded (simulated)
            done += buf.nbytes
        return done

    def pinned(self):
        return sum(b.nbytes for b, r in zip(self.buffers, self.registered, strict=True) if r)

    # --- what upstream's ladder and the worker's report call -------------------------------

    def is_dynamic(self):
        return True

    def unregister_inactive_pins(self, ram_to_unload, subsets=None):
        import comfy.model_management as mm

        freed = 0
        for i in range(len(self.buffers) - 1, -1, -1):
            if ram_to_unload <= 0:
                break
            if not self.registered[i]:
                continue
            size = self.buffers[i].nbytes
            self.registered[i] = False  # cudaHostUnregister succeeded (simulated)
            mm.TOTAL_PINNED_MEMORY = max(0, mm.TOTAL_PINNED_MEMORY - size)
            freed += size
            ram_to_unload -= size
        return freed

    def partially_unload_ram(self, ram_to_unload, subsets=None):
        return 0

    def model_size(self):
        return 0  # nothing on the device: it holds pinned RAM only

    def loaded_size(self):
        return 0

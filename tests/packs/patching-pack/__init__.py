"""A pack that changes ComfyUI's behaviour by replacing its functions when it is imported, in
the shape of smZNodes (``comfy.samplers.KSampler.sample``) and of the prompt and XY packs
(``execution.validate_inputs``). Each replacement calls the original, so natively it changes
nothing. It also adds a scheduler of its own to ComfyUI's lists, in RES4LYF's shape (its
``beta57``: a ``SchedulerHandler`` in ``SCHEDULER_HANDLERS``, its name appended to
``SCHEDULER_NAMES``, which is KSampler's list) (tests/comfyui/test_pack_patches.py)."""

from functools import partial

import comfy.samplers
import execution

if "airlock_beta57" not in comfy.samplers.SCHEDULER_HANDLERS:
    comfy.samplers.SCHEDULER_HANDLERS["airlock_beta57"] = comfy.samplers.SchedulerHandler(
        handler=partial(comfy.samplers.beta_scheduler, alpha=0.5, beta=0.7), use_ms=True
    )
    comfy.samplers.SCHEDULER_NAMES.append("airlock_beta57")

_sample = comfy.samplers.KSampler.sample


def _wrapped_sample(self, *args, **kwargs):
    return _sample(self, *args, **kwargs)


comfy.samplers.KSampler.sample = _wrapped_sample

_validate_inputs = execution.validate_inputs


def _wrapped_validate_inputs(*args, **kwargs):
    return _validate_inputs(*args, **kwargs)


execution.validate_inputs = _wrapped_validate_inputs


class PatchingPackEcho:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"text": ("STRING", {"default": "patched"})}}

    RETURN_TYPES = ("STRING",)
    FUNCTION = "run"
    CATEGORY = "airlock/tests"

    def run(self, text):
        return (text,)


NODE_CLASS_MAPPINGS = {"PatchingPackEcho": PatchingPackEcho}

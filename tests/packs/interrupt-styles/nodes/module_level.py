"""The module imported at the top, its function called through it (most packs, samplers)."""

import time

import comfy.model_management

from .common import RunsUntilCancelled, imported, started, stopped


class AirlockModuleLevelCheck(RunsUntilCancelled):
    def run(self, seconds, marker):
        started(marker, imported())
        t0 = time.time()
        try:
            while time.time() - t0 < seconds:
                comfy.model_management.throw_exception_if_processing_interrupted()
                time.sleep(0.001)
        except comfy.model_management.InterruptProcessingException as e:
            stopped(marker, e)
            raise
        return {"ui": {"text": ["finished"]}}


NODE_CLASS_MAPPINGS = {"AirlockModuleLevelCheck": AirlockModuleLevelCheck}

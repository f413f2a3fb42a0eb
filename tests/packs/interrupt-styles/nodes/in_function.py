"""The module imported inside the node, as packs do to keep their import light."""

import time

from .common import RunsUntilCancelled, imported, started, stopped


class AirlockInFunctionCheck(RunsUntilCancelled):
    def run(self, seconds, marker):
        already = imported()
        import comfy.model_management as mm

        started(marker, already)
        t0 = time.time()
        try:
            while time.time() - t0 < seconds:
                mm.throw_exception_if_processing_interrupted()
                time.sleep(0.001)
        except mm.InterruptProcessingException as e:
            stopped(marker, e)
            raise
        return {"ui": {"text": ["finished"]}}


NODE_CLASS_MAPPINGS = {"AirlockInFunctionCheck": AirlockInFunctionCheck}

"""The functions imported by name at the top: bound before any call, so they must see the
cancel whatever the worker did to the module afterwards."""

import time

from comfy.model_management import (
    InterruptProcessingException,
    interrupt_current_processing,
    processing_interrupted,
    throw_exception_if_processing_interrupted,
)

from .common import RunsUntilCancelled, imported, started, stopped


class AirlockByNameThrow(RunsUntilCancelled):
    def run(self, seconds, marker):
        started(marker, imported())
        t0 = time.time()
        try:
            while time.time() - t0 < seconds:
                throw_exception_if_processing_interrupted()
                time.sleep(0.001)
        except InterruptProcessingException as e:
            stopped(marker, e)
            raise
        return {"ui": {"text": ["finished"]}}


class AirlockByNamePoll(RunsUntilCancelled):
    """Polls, as API nodes do while they wait on a server, and stops itself."""

    def run(self, seconds, marker):
        started(marker, imported())
        t0 = time.time()
        while time.time() - t0 < seconds:
            if processing_interrupted():
                e = InterruptProcessingException()
                stopped(marker, e)
                raise e
            time.sleep(0.001)
        return {"ui": {"text": ["finished"]}}


class AirlockByNameAcknowledge(RunsUntilCancelled):
    """Polls, then clears the flag itself as ComfyUI's executor does, before stopping."""

    def run(self, seconds, marker):
        started(marker, imported())
        t0 = time.time()
        while time.time() - t0 < seconds:
            if processing_interrupted():
                interrupt_current_processing(False)
                e = InterruptProcessingException()
                stopped(marker, e)
                raise e
            time.sleep(0.001)
        return {"ui": {"text": ["finished"]}}


NODE_CLASS_MAPPINGS = {
    "AirlockByNameThrow": AirlockByNameThrow,
    "AirlockByNamePoll": AirlockByNamePoll,
    "AirlockByNameAcknowledge": AirlockByNameAcknowledge,
}

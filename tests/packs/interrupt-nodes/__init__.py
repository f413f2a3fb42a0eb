"""Nodes that run until they are cancelled, each in its own way (tests/comfyui/test_interrupts.py)."""

import os
import signal
import time

import comfy.model_management


def _started(marker):
    if marker:
        with open(marker, "w") as f:
            f.write(str(time.time()))


class _RunsUntilCancelled:
    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "seconds": ("FLOAT", {"default": 60.0}),
                "marker": ("STRING", {"default": ""}),
            }
        }

    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "run"
    CATEGORY = "airlock/tests"


class AirlockSpin(_RunsUntilCancelled):
    """Checks for a cancel every millisecond, as samplers do; writes when it saw it."""

    def run(self, seconds, marker):
        _started(marker + ".started" if marker else "")
        t0 = time.time()
        try:
            while time.time() - t0 < seconds:
                comfy.model_management.throw_exception_if_processing_interrupted()
                time.sleep(0.001)
        except comfy.model_management.InterruptProcessingException:
            _started(marker + ".stopped" if marker else "")
            raise
        return {"ui": {"text": ["finished"]}}


class AirlockSleep(_RunsUntilCancelled):
    """Never checks; SIGINT stops it."""

    def run(self, seconds, marker):
        _started(marker + ".started" if marker else "")
        time.sleep(seconds)
        return {"ui": {"text": ["slept"]}}


class AirlockDeaf(AirlockSleep):
    """Never checks and blocks SIGINT: only a kill stops it."""

    def run(self, seconds, marker):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            return super().run(seconds, marker)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class AirlockPid:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"salt": ("INT", {"default": 0})}}

    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "run"
    CATEGORY = "airlock/tests"

    def run(self, salt):
        return {"ui": {"text": [str(os.getpid())]}}


class AirlockStop:
    """Passes its input on and stops the prompt, in the shape of mxToolkit's "Stop" node: it
    raises ComfyUI's interrupt itself and returns."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"text": ("STRING", {"default": "x"})}}

    RETURN_TYPES = ("STRING",)
    FUNCTION = "run"
    CATEGORY = "airlock/tests"

    def run(self, text):
        import nodes

        nodes.interrupt_processing()
        return (text,)


class AirlockShow:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"text": ("STRING", {"forceInput": True})}}

    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "run"
    CATEGORY = "airlock/tests"

    def run(self, text):
        return {"ui": {"text": [text]}}


NODE_CLASS_MAPPINGS = {
    "AirlockStop": AirlockStop,
    "AirlockShow": AirlockShow,
    "AirlockSpin": AirlockSpin,
    "AirlockSleep": AirlockSleep,
    "AirlockDeaf": AirlockDeaf,
    "AirlockPid": AirlockPid,
}

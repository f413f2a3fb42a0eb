"""The markers are those of tests/packs/interrupt-styles (see its nodes/common.py)."""

import json
import os
import sys
import time


def _write(path, **data):
    with open(path + ".tmp", "w") as f:
        json.dump({"at": time.time(), **data}, f)
    os.replace(path + ".tmp", path)


class _Late:
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


class AirlockLateImport(_Late):
    def run(self, seconds, marker):
        already = "comfy.model_management" in sys.modules
        import comfy.model_management as mm

        _write(marker + ".started", already_imported=already, pid=os.getpid())
        t0 = time.time()
        try:
            while time.time() - t0 < seconds:
                mm.throw_exception_if_processing_interrupted()
                time.sleep(0.001)
        except mm.InterruptProcessingException as e:
            _write(marker + ".stopped", message=str(e))
            raise
        return {"ui": {"text": ["finished"]}}


class AirlockLateFromImport(_Late):
    def run(self, seconds, marker):
        already = "comfy.model_management" in sys.modules
        from comfy.model_management import (
            InterruptProcessingException,
            throw_exception_if_processing_interrupted,
        )

        _write(marker + ".started", already_imported=already, pid=os.getpid())
        t0 = time.time()
        try:
            while time.time() - t0 < seconds:
                throw_exception_if_processing_interrupted()
                time.sleep(0.001)
        except InterruptProcessingException as e:
            _write(marker + ".stopped", message=str(e))
            raise
        return {"ui": {"text": ["finished"]}}


NODE_CLASS_MAPPINGS = {
    "AirlockLateImport": AirlockLateImport,
    "AirlockLateFromImport": AirlockLateFromImport,
}

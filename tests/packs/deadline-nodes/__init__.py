"""A node that sleeps as long as it is told, in a pack whose calls have a 1.5 s deadline
(tests/comfyui/test_interrupts.py)."""

import time


class AirlockSlowNode:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"seconds": ("FLOAT", {"default": 0.1})}}

    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "run"
    CATEGORY = "airlock/tests"

    def run(self, seconds):
        time.sleep(seconds)
        return {"ui": {"text": [f"slept {seconds}"]}}


NODE_CLASS_MAPPINGS = {"AirlockSlowNode": AirlockSlowNode}

"""A node that sleeps as long as it is told, in a pack whose calls have a 1.5 s deadline
(tests/comfyui/test_interrupts.py), and whose import takes longer than that (as a pack that
loads a model or compiles kernels at import does): the deadline is the node's, so every new
worker imports the pack first, on no deadline."""

import time

time.sleep(2.0)


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

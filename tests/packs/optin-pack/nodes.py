"""Runs only in the worker."""

import os
import sys


class OptInEcho:
    CATEGORY = "airlock tests"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "echo"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"text": ("STRING", {"default": "hi"})}}

    def echo(self, text):
        worker = os.environ.get("AIRLOCK_WORKER")
        prestartup = os.environ.get("OPTIN_PRESTARTUP")
        return (f"optin:{text}:worker={worker}:prestartup={prestartup}:{sys.prefix}",)


NODE_CLASS_MAPPINGS = {"OptInEcho": OptInEcho}
NODE_DISPLAY_NAME_MAPPINGS = {"OptInEcho": "Opt-in Echo"}

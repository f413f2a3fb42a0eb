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
        return (f"optin:{text}:worker={os.environ.get('AIRLOCK_WORKER')}:{sys.prefix}",)


NODE_CLASS_MAPPINGS = {"OptInEcho": OptInEcho}
NODE_DISPLAY_NAME_MAPPINGS = {"OptInEcho": "Opt-in Echo"}

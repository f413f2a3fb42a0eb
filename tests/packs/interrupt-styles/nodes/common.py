"""What every node here shares: its inputs, and the marker files the test reads.

``<marker>.started`` holds whether ``comfy.model_management`` was already imported when the
node began, and the worker's pid; ``<marker>.stopped`` holds when the node's own check fired and the message of the
exception it saw (empty for upstream's own ``InterruptProcessingException()``; comfy-airlock's
SIGINT escalation says so in its message)."""

import json
import os
import sys
import time


class RunsUntilCancelled:
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


def started(marker, already_imported):
    _write(
        marker + ".started",
        {"at": time.time(), "already_imported": already_imported, "pid": os.getpid()},
    )


def stopped(marker, exc):
    _write(marker + ".stopped", {"at": time.time(), "message": str(exc)})


def imported():
    return "comfy.model_management" in sys.modules


def _write(path, data):
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)

"""Nodes that the interrupt and liveness tests run in workers, against the real upstream
``comfy.model_management`` (from $COMFYUI_DIR, on CPU)."""

import os
import signal
import sys
import time


def _mm():
    comfyui = os.environ["COMFYUI_DIR"]
    if comfyui not in sys.path:
        sys.path.insert(1, comfyui)
    import comfy.cli_args

    comfy.cli_args.args.cpu = True
    import comfy.model_management as mm

    from comfy_airlock.worker import interrupts

    interrupts.begin_call()
    return mm


def spin(limit=60.0, catch=False, via="throw"):
    """Checks for interrupts every millisecond, as a sampler does; with ``catch``, returns the
    time the check fired instead of raising."""
    mm = _mm()
    t0 = time.time()
    try:
        while time.time() - t0 < limit:
            if via == "throw":
                mm.throw_exception_if_processing_interrupted()
            elif mm.processing_interrupted():
                return ("interrupted", time.time())
            time.sleep(0.001)
    except mm.InterruptProcessingException:
        if catch:
            return ("interrupted", time.time())
        raise
    return ("finished", time.time())


def sleep(seconds):
    """Never checks; SIGINT stops it."""
    time.sleep(seconds)
    return "slept"


def sleep_deaf(seconds):
    """Never checks and blocks SIGINT: only a kill stops it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        time.sleep(seconds)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    return "slept"


def warm():
    """Imports torch and comfy (seconds), so that a test times only what it means to."""
    _mm()
    return os.getpid()


def pid():
    return os.getpid()


def ask(topic, payload):
    """Asks the host a question from inside a call."""
    from comfy_airlock.worker import runtime

    return runtime.ask(topic, payload)

"""A pack whose import raises, as a real pack does when its requirements forget a dependency
(tests/comfyui/test_import_failure.py): the traceback must reach the log, ``/airlock/workers``
and ``airlock doctor``, and the failure must be cached rather than imported at every start.

Each import appends a line to ``$AIRLOCK_TEST_IMPORT_LOG`` (``AIRLOCK_*`` reaches workers), so
the test can count how often ComfyUI imported it."""

import os

_log = os.environ.get("AIRLOCK_TEST_IMPORT_LOG")
if _log:
    with open(_log, "a") as f:
        f.write(f"{os.getpid()}\n")

from .nodes import NODE_CLASS_MAPPINGS  # noqa: E402

__all__ = ["NODE_CLASS_MAPPINGS"]

"""A pack module that crashes the interpreter while it is being imported (a broken native
extension does this): SIGSEGV, no Python exception, no traceback."""

import os
import signal
import sys

print("fault_segv_at_import: about to crash", file=sys.stderr, flush=True)
os.kill(os.getpid(), signal.SIGSEGV)

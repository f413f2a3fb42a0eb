"""The ``airlock`` command (``airlock build | doctor | gc``, done in Rust; ``airlock status``,
which reads a running ComfyUI).

This wrapper tells the core which interpreter runs it (the default Python of packs that do not
ask for one) and where the ``uv`` package put its binary.
"""

from __future__ import annotations

import os
import sys

import comfy_airlock
from comfy_airlock import _native


def _bundled_uv() -> str | None:
    try:
        from uv import find_uv_bin
    except ImportError:
        return None
    try:
        return find_uv_bin()
    except Exception:  # the package is there but its binary is not
        return None


def main(argv: list[str] | None = None) -> int:
    """Runs ``airlock`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["status"]:  # asks a running ComfyUI over HTTP: no core needed
        from comfy_airlock import status

        return status.main(args[1:])
    # This package is part of the scan cache's key (host/scan_cache.py): doctor needs it.
    package = os.path.dirname(os.path.abspath(comfy_airlock.__file__))
    hidden = ["--host-python", sys.executable, "--airlock-package", package]
    uv = _bundled_uv()
    if uv:
        hidden += ["--bundled-uv", uv]
    sys.stdout.flush()
    return _native.cli_main(["airlock", *hidden, *args])


if __name__ == "__main__":
    sys.exit(main())

"""The ``airlock`` command: ``build | doctor | gc`` are done in Rust; ``status`` (which reads a
running ComfyUI), ``install`` and ``isolate`` (which move folders of a ComfyUI) in Python.

This wrapper tells the core which interpreter runs it (the default Python of packs that do not
ask for one) and where the ``uv`` package put its binary.
"""

from __future__ import annotations

import os
import sys

import comfy_airlock
from comfy_airlock import _native


def bundled_uv() -> str | None:
    try:
        from uv import find_uv_bin
    except ImportError:
        return None
    try:
        return find_uv_bin()
    except Exception:  # the package is there but its binary is not
        return None


_PYTHON_COMMANDS = {
    "status": "comfy_airlock.status",
    "install": "comfy_airlock.install",
    "isolate": "comfy_airlock.isolate",
}
_USAGE_EXTRA = """
Also (in Python):
  install  Put comfy-airlock's custom node into ComfyUI and create isolated_nodes/
  isolate  Move a pack from custom_nodes/ into isolated_nodes/ and build its environment
  status   What a running ComfyUI's isolated packs hold (its /airlock/status)
"""


def main(argv: list[str] | None = None) -> int:
    """Runs ``airlock`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    module = _PYTHON_COMMANDS.get(args[0]) if args else None
    if module is not None:
        import importlib

        return importlib.import_module(module).main(args[1:])
    # This package is part of the scan cache's key (host/scan_cache.py): doctor needs it.
    package = os.path.dirname(os.path.abspath(comfy_airlock.__file__))
    hidden = ["--host-python", sys.executable, "--airlock-package", package]
    uv = bundled_uv()
    if uv:
        hidden += ["--bundled-uv", uv]
    sys.stdout.flush()
    code = _native.cli_main(["airlock", *hidden, *args])
    if not args or args[0] in ("-h", "--help", "help"):
        print(_USAGE_EXTRA.rstrip())
    return code


if __name__ == "__main__":
    sys.exit(main())

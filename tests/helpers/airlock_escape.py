"""What a hostile (or careless) pack would try from inside its worker; each attempt returns
``"ok"`` or ``"denied <errno name>"``, so a test can say which ones the sandbox stopped."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import tempfile
from typing import Any


def _try(fn) -> str:
    try:
        fn()
        return "ok"
    except OSError as e:
        return f"denied {errno.errorcode.get(e.errno or 0, e.errno)}"


def _read(path: str) -> None:
    with open(path, "rb") as f:
        f.read()


def _write(path: str) -> None:
    with open(path, "w") as f:
        f.write("x")


def attempt(kind: str, arg: Any = None) -> str:
    if kind == "read":
        return _try(lambda: _read(arg))
    if kind == "list":
        return _try(lambda: os.listdir(arg))
    if kind == "write":
        return _try(lambda: _write(arg))
    if kind == "exec":
        return _try(lambda: subprocess.run([arg], check=False))
    if kind == "signal":
        return _try(lambda: os.kill(arg, 0))
    if kind == "tcp":
        return _try(lambda: socket.create_connection(("127.0.0.1", arg), timeout=5).close())
    if kind == "udp":

        def send() -> None:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(b"x", ("127.0.0.1", arg))

        return _try(send)
    if kind == "tmp":
        # The private temp dir: writable, and where tempfile puts things.
        def make() -> None:
            with tempfile.NamedTemporaryFile(delete=False) as f:
                f.write(b"x")

        return _try(make)
    raise ValueError(kind)


def attempts(cases: list[tuple[str, Any]]) -> list[str]:
    return [attempt(kind, arg) for kind, arg in cases]


def environ() -> dict[str, str]:
    return dict(os.environ)


def tmpdir() -> str:
    return tempfile.gettempdir()


def leave_temp_files(n: int) -> str:
    d = tempfile.gettempdir()
    for i in range(n):
        with open(os.path.join(d, f"left-{i}"), "w") as f:
            f.write("x")
    os.makedirs(os.path.join(d, "sub", "deeper"), exist_ok=True)
    return d


def torch_and_comfy() -> dict[str, Any]:
    """ComfyUI and torch working inside the sandbox: imports, a computation, ComfyUI's folders."""
    import comfy.cli_args

    comfy.cli_args.args.cpu = True
    import comfy.model_management as mm
    import folder_paths
    import torch

    x = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    return {
        "sum": float((x @ x).sum()),
        "device": str(mm.get_torch_device()),
        "output": folder_paths.get_output_directory(),
        "checkpoints": folder_paths.get_filename_list("checkpoints"),
    }

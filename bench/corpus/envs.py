"""The native side's Python: a venv with exactly the packages of the pack's isolated
environment (ComfyUI's requirements pinned to the host's versions, plus the pack's own, as
``airlock isolate`` built it), plus ComfyUI's browser-UI packages that the isolated env leaves
out. Native and isolated then run the pack on the same package versions: like with like.

Made with uv from the env's ``pip freeze`` (``--no-deps``: an exact copy, hard-linked from uv's
cache, so a second copy of torch costs little disk), keyed by what it holds, so packs whose
environments are equal share one. Never touches the host ``.venv``.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

# ComfyUI's requirements that the isolated env leaves out (the browser UI's), taken from the
# host venv at the host's versions.
UI_PACKAGES = ("comfyui-frontend-package", "comfyui-workflow-templates", "comfyui-embedded-docs")


def _freeze(uv: str, python: str) -> list[str]:
    out = subprocess.run(
        [uv, "pip", "freeze", "--python", python],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def _name(line: str) -> str:
    for sep in ("==", " @ ", "@"):
        if sep in line:
            return line.split(sep, 1)[0].strip().lower().replace("_", "-")
    return line.strip().lower()


def _python_version(python: str) -> str:
    return subprocess.run(
        [python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def _slot(root: Path, key: str, lines: list[str]) -> tuple[Path, Path | None]:
    """The interpreter of the venv ``root/key``, and the requirements file written for making
    it (None when it is already complete)."""
    venv = root / key
    python = venv / "bin" / "python"
    if (venv / ".complete").is_file():
        return python, None
    venv.parent.mkdir(parents=True, exist_ok=True)
    reqs = root / f"{key}.txt"
    reqs.write_text("\n".join(lines) + "\n")
    return python, reqs


def native_python(uv: str, env_python: str, host_python: str, root: Path, log: Path) -> str:
    """The native venv's interpreter for a pack whose isolated env runs ``env_python``."""
    # The frontend both servers serve is the host's: a pack that lists the frontend package
    # (cg-use-everywhere) gets the newest in its env, natively the host's satisfies it.
    pins = [p for p in _freeze(uv, env_python) if not _name(p).startswith(UI_PACKAGES)]
    ui = [p for p in _freeze(uv, host_python) if _name(p).startswith(UI_PACKAGES)]
    version = _python_version(env_python)
    wanted = sorted(set(pins) | set(ui))
    key = hashlib.sha256(json.dumps([version, wanted]).encode()).hexdigest()[:16]
    python, reqs = _slot(root, key, wanted)
    venv = python.parent.parent
    if reqs is None:
        return str(python)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        subprocess.run(
            [uv, "venv", "--clear", "--python", env_python, str(venv)],
            check=True,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        subprocess.run(
            [uv, "pip", "install", "--no-deps", "--python", str(python), "-r", str(reqs)],
            check=True,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    (venv / ".complete").write_text(version + "\n")
    return str(python)


def host_with(uv: str, host_python: str, extra: list[str], root: Path, log: Path) -> str:
    """A copy of the host venv (the same packages, comfy-airlock from this source tree) that
    also has ``extra``: ComfyUI's environment as a user has it once other packs installed,
    say, OpenCV (``run.py --host-has``). Native packs import such packages without declaring
    them; ``airlock isolate`` run by this interpreter finds them (ADR 0049)."""
    frozen = [p for p in _freeze(uv, host_python) if _name(p) != "comfy-airlock"]
    key = hashlib.sha256(json.dumps([frozen, sorted(extra)]).encode()).hexdigest()[:16]
    python, pins = _slot(root, f"host-{key}", frozen)
    venv = python.parent.parent
    if pins is None:
        return str(python)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        for cmd in (
            [uv, "venv", "--clear", "--python", host_python, str(venv)],
            [uv, "pip", "install", "--no-deps", "--python", str(python), "-r", str(pins)],
            # The extras with what they need, never moving a package the host has.
            [uv, "pip", "install", "--python", str(python), "-c", str(pins), *extra],
        ):
            subprocess.run(cmd, check=True, stdout=out, stderr=subprocess.STDOUT)
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.check_output([host_python, "-c", purelib], text=True).strip())
    dst = Path(subprocess.check_output([str(python), "-c", purelib], text=True).strip())
    for pth in site.glob("comfy_airlock*.pth"):  # the source tree's package, as in the host
        (dst / pth.name).write_text(pth.read_text())
    (venv / ".complete").write_text("\n".join(extra) + "\n")
    return str(python)

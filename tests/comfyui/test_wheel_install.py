"""What a new user does, end to end, with nothing of this checkout but the wheel:

1. ``make wheel`` (scripts/wheel.sh; cached by its inputs' hash) gives one abi3 manylinux file;
2. a fresh ComfyUI venv (ComfyUI's own requirements.txt, pinned to what .venv has so that uv
   links them from its cache) gets ``pip install <wheel>``, with no Rust toolchain on PATH;
3. ``airlock install`` puts the custom node into ComfyUI, ``airlock isolate`` turns a pack of
   ``custom_nodes/`` (tests/packs/plain-pack, which knows nothing of comfy-airlock) into an
   isolated one;
4. the real ComfyUI 0.30.0 started from that venv runs the pack's node in its own environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, interpreter, missing

from .harness import ComfyUI, make_base_dir

AIRLOCK_HOME = Path(os.environ.get("AIRLOCK_TEST_HOME") or ROOT / ".cache" / "test-airlock-home")
UV = ROOT / ".venv" / "bin" / "uv"
PLAIN = ROOT / "tests" / "packs" / "plain-pack"


def no_rust_path(venv: Path) -> str:
    """PATH with the venv first and no cargo or rustc anywhere on it."""
    keep = [str(venv / "bin")]
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if d and not (shutil.which("cargo", path=d) or shutil.which("rustc", path=d)):
            keep.append(d)
    return os.pathsep.join(keep)


def run(cmd: list[str], env: dict[str, str], timeout: float = 600) -> str:
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{cmd} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r.stdout + r.stderr


@pytest.fixture(scope="module")
def wheel() -> Path:
    if shutil.which("cargo") is None and not (Path.home() / ".cargo" / "bin").is_dir():
        missing("cargo is missing: the wheel cannot be built")
    t0 = time.monotonic()
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "wheel.sh")],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert out.returncode == 0, out.stderr[-5000:]
    path = Path(out.stdout.strip().splitlines()[-1])
    print(f"wheel ready in {time.monotonic() - t0:.1f}s: {path.name}")
    return path


def test_wheel_is_one_abi3_manylinux_file(wheel):
    assert wheel.name.endswith("-cp310-abi3-manylinux_2_28_x86_64.whl"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = next(n for n in names if n.endswith(".dist-info/WHEEL"))
        tags = [
            x.split(": ", 1)[1] for x in z.read(meta).decode().splitlines() if x.startswith("Tag:")
        ]
    assert tags == ["cp310-abi3-manylinux_2_28_x86_64"]
    assert any(n.startswith("comfy_airlock/_native") and n.endswith(".so") for n in names)
    web = (
        "airlock_panel.js",
        *(f"airlock_panel/{m}.js" for m in ("store", "view", "chart", "format")),
        "isolated_extensions.js",
    )
    for f in ("__init__.py", "pyproject.toml", "requirements.txt", *(f"web/{w}" for w in web)):
        assert f"comfy_airlock/custom_node/{f}" in names
    # The glibc symbols it links against fit the tag (auditwheel reads the ELF itself).
    shown = run([str(ROOT / ".venv" / "bin" / "auditwheel"), "show", str(wheel)], dict(os.environ))
    assert 'is consistent with the following platform tag: "manylinux_2_28_x86_64"' in " ".join(
        shown.split()
    ), shown


@pytest.mark.parametrize("python", ["py310", "py312"])
def test_the_same_file_installs_and_isolates_on_other_pythons(wheel, python, tmp_path):
    """abi3: the one wheel works on 3.10 (tomli instead of tomllib) and 3.12 too."""
    venv = tmp_path / "venv"
    env = {**os.environ, "PATH": no_rust_path(venv), "AIRLOCK_HOME": str(AIRLOCK_HOME)}
    for k in ("VIRTUAL_ENV", "PYTHONPATH", "COMFYUI_DIR"):
        env.pop(k, None)
    run([str(UV), "venv", "-q", "--python", interpreter(python), str(venv)], env)
    pins = ["-c", str(ROOT / "requirements" / "dev.txt")]
    run(
        [
            str(UV),
            "pip",
            "install",
            "-q",
            "--python",
            str(venv / "bin" / "python"),
            str(wheel),
            *pins,
        ],
        env,
    )
    comfy = tmp_path / "ComfyUI"  # a folder the command takes for ComfyUI; one tiny requirement
    (comfy / "comfy").mkdir(parents=True)
    (comfy / "main.py").write_text("")
    (comfy / "requirements.txt").write_text("six\n")
    airlock = str(venv / "bin" / "airlock")
    run([airlock, "install", "--comfyui", str(comfy)], env)
    shutil.copytree(PLAIN, comfy / "custom_nodes" / "plain-pack")
    out = run([airlock, "isolate", "plain-pack", "--comfyui", str(comfy)], env)
    version = {"py310": "3.10", "py312": "3.12"}[python]
    assert f"1 node(s), running in Python {version}." in out, out


@pytest.fixture(scope="module")
def user_venv(wheel, comfyui_dir, tmp_path_factory) -> Path:
    """A fresh ComfyUI venv with the wheel installed, no Rust on PATH."""
    venv = tmp_path_factory.mktemp("user") / "venv"
    env = {**os.environ, "PATH": no_rust_path(venv)}
    env.pop("VIRTUAL_ENV", None)
    assert shutil.which("cargo", path=env["PATH"]) is None
    assert shutil.which("rustc", path=env["PATH"]) is None
    t0 = time.monotonic()
    run([str(UV), "venv", "-q", "--python", sys.executable, str(venv)], env)
    pins = ["-c", str(ROOT / "requirements" / "dev.txt")]
    py = ["--python", str(venv / "bin" / "python")]
    run(
        [str(UV), "pip", "install", "-q", *py, "-r", str(comfyui_dir / "requirements.txt"), *pins],
        env,
    )
    t1 = time.monotonic()
    run([str(UV), "pip", "install", "-q", *py, str(wheel), *pins], env)
    print(f"ComfyUI venv {t1 - t0:.1f}s, wheel install {time.monotonic() - t1:.1f}s")
    return venv


def test_wheel_installs_and_runs_a_pack_in_comfyui_without_rust(user_venv, comfyui_dir, tmp_path):
    env = {**os.environ, "PATH": no_rust_path(user_venv), "AIRLOCK_HOME": str(AIRLOCK_HOME)}
    for k in ("VIRTUAL_ENV", "PYTHONPATH", "COMFYUI_DIR"):
        env.pop(k, None)
    py = str(user_venv / "bin" / "python")
    where = run([py, "-c", "import comfy_airlock; print(comfy_airlock.__file__)"], env)
    assert where.strip().startswith(str(user_venv)), where  # the wheel's, not this checkout's

    base = make_base_dir(tmp_path)
    shutil.rmtree(base / "isolated_nodes")  # `airlock install` makes it
    shutil.copytree(PLAIN, base / "custom_nodes" / "plain-pack")
    airlock = str(user_venv / "bin" / "airlock")
    place = ["--comfyui", str(comfyui_dir), "--base", str(base)]
    out = run([airlock, "install", *place], env)
    assert (base / "custom_nodes" / "comfy-airlock" / "pyproject.toml").is_file(), out
    assert (base / "isolated_nodes").is_dir() and "Next:" in out
    # A Manager-style install of the custom node's requirements is satisfied by the wheel.
    req = base / "custom_nodes" / "comfy-airlock" / "requirements.txt"
    run([str(UV), "pip", "install", "--offline", "--python", py, "-r", str(req)], env)

    out = run([airlock, "isolate", "plain-pack", *place], env, timeout=900)
    assert "PlainWhere (Plain: where am I)" in out, out
    assert (base / "isolated_nodes" / "plain-pack" / "airlock.toml").is_file()
    assert not (base / "custom_nodes" / "plain-pack").exists()

    ui = ComfyUI(comfyui_dir, base, python=py, env=env, startup_timeout=900, start=False)
    try:
        ui.start()
        assert "PlainWhere" in ui.object_info()
        entry = ui.run({"1": {"class_type": "PlainWhere", "inputs": {"text": "wheel"}}})
        [report] = entry["outputs"]["1"]["text"]
        text, prefix, six = report.split("|")
        assert text == "wheel"
        # Its own environment under AIRLOCK_HOME, not ComfyUI's venv: six comes from there.
        assert Path(prefix).is_relative_to(AIRLOCK_HOME / "envs"), report
        assert six.split()[-1].startswith(prefix), report
        [row] = [r for r in ui.get("/airlock/workers") if r["pack"] == "plain-pack"]
        assert row["state"] == "running" and row["pid"], row
        log = ui.log_text()
        assert "IMPORT FAILED" not in log, ui.log_tail(100)
        assert "Unable to parse pyproject.toml" not in log, ui.log_tail(100)  # our metadata
    finally:
        ui.stop()

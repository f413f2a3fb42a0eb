"""A pack written for comfy-env (tests/packs/comfyenv-pack: root ``register_nodes``,
``install.py``, ``prestartup_script.py``, ``comfy-env-root.toml``, ``nodes/geometry/`` with conda,
PyPI and ``[cuda]`` packages, ``nodes/plain/`` without a config) runs unchanged in real
ComfyUI from ``custom_nodes/``: its ``install.py`` builds its env (conda packages from a
channel made here, indexed with rattler_index; the CUDA wheel from a find-links folder), and
ComfyUI then runs its isolated nodes in that env and its plain folder in-process."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conda_channel import Package, host_base_python, make_channel, make_wheel, python_standing_for

from .harness import ComfyUI, make_base_dir

REPO = Path(__file__).resolve().parents[2]
PACK = REPO / "tests" / "packs" / "comfyenv-pack"
AIRLOCK_HOME = Path(os.environ.get("AIRLOCK_TEST_HOME") or REPO / ".cache" / "test-airlock-home")
# Stable places, so that an unchanged channel gives the same env key run after run.
FIXTURES = REPO / ".cache" / "test-comfy-env"


def _channel() -> Path:
    base = host_base_python()
    version = ".".join(map(str, sys.version_info[:3]))
    return make_channel(
        FIXTURES / "channels" / "conda-forge",
        [
            python_standing_for(base, version),
            Package(
                "tinygeom",
                "1.2",
                files={
                    "bin/tinygeom": "#!/bin/sh\necho tinygeom 1.2 from conda\n",
                    "share/tinygeom/shape.txt": "triangle\n",
                },
                executable=("bin/tinygeom",),
            ),
            Package("tinygeom", "0.9", files={"share/tinygeom/shape.txt": "old\n"}),
            Package(
                "tinygeom-py",
                "1.0",
                depends=["python"],
                noarch_python=True,
                files={"site-packages/tinygeom_py/__init__.py": 'VALUE = "conda noarch"\n'},
            ),
            Package(
                "tinygeom-linux",
                "1.0",
                subdir="linux-64",
                files={"share/tinygeom/linux.txt": "linux\n"},
            ),
        ],
    )


def _cuda_wheel() -> tuple[Path, str]:
    """A wheel tagged for the host's torch and CUDA, in comfy-env's index layout."""
    import torch

    cuda = (torch.version.cuda or "12.8").replace(".", "")[:3]
    torch_mm = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    py = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    local = f"cu{cuda}torch{torch_mm}"
    make_wheel(
        FIXTURES / "cuda-wheels" / "tinycuda",
        "tinycuda",
        f"0.1+{local}",
        f"{py}-{py}-linux_x86_64",
        {"tinycuda/__init__.py": f'TAG = "{local}"\n'},
    )
    return FIXTURES / "cuda-wheels", local


@pytest.fixture(scope="module")
def server(comfyui_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("comfyenv")
    FIXTURES.mkdir(parents=True, exist_ok=True)
    _channel()
    wheels, local = _cuda_wheel()
    import torch

    env = {
        "AIRLOCK_HOME": str(AIRLOCK_HOME),
        "AIRLOCK_CONDA_CHANNEL_ALIAS": str(FIXTURES / "channels"),
        "AIRLOCK_CUDA_WHEELS": str(wheels),
        # A CPU-only torch has no CUDA to match: name the one the test wheel was tagged for.
        "AIRLOCK_CUDA_VERSION": torch.version.cuda or "12.8",
        "COMFYUI_DIR": str(comfyui_dir),
    }
    base = make_base_dir(tmp, custom_nodes={"comfyenv-pack": PACK})
    # What ComfyUI-Manager does after cloning a pack: run its install.py with ComfyUI's Python.
    installed = subprocess.run(
        [sys.executable, "install.py"],
        cwd=base / "custom_nodes" / "comfyenv-pack",
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    ui = ComfyUI(comfyui_dir, base, env={**env, "AIRLOCK_AUTO_BUILD": "0"}, start=False)
    ui.start()
    ui.install_output = installed.stdout + installed.stderr
    ui.local = local
    ui.test_env = env
    yield ui
    ui.stop()


def test_install_py_builds_the_env_and_reports_peer_packs(server):
    out = server.install_output
    assert "comfyenv-pack/geometry: ready:" in out, out
    assert "ComfyUI-TinyPeer" in out and "does not clone" in out, out
    env_dir = Path(out.split("comfyenv-pack/geometry: ready: ", 1)[1].split()[0])
    # The [cuda] package is in the lock, pinned to the wheel built for the host's torch and CUDA.
    lock = (env_dir / "airlock.lock").read_text()
    assert f"tinycuda @ file://{FIXTURES}/cuda-wheels/tinycuda/tinycuda-0.1+{server.local}-" in lock


def test_nodes_register_isolated_and_in_process(server):
    info = server.object_info()
    for node in ("MakeMeshlet", "GeometryReport", "PlainEcho"):
        assert node in info, sorted(info)[:20]
    assert info["GeometryReport"]["display_name"] == "Geometry report (conda env)"
    rows = {r["pack"]: r for r in server.get("/airlock/workers")}
    assert "comfyenv-pack/geometry" in rows, rows
    # The prestartup script ran in ComfyUI (copy_files into input/).
    copied = server.base_dir / "input" / "comfyenv-pack" / "example.txt"
    assert copied.read_text() == "a tiny example input\n"


def test_isolated_nodes_run_in_their_conda_env(server):
    prompt = {
        "1": {"class_type": "MakeMeshlet", "inputs": {"count": 4}},
        "2": {"class_type": "GeometryReport", "inputs": {"meshlet": ["1", 0]}},
        "3": {"class_type": "PlainEcho", "inputs": {"text": "plain"}},
    }
    entry = server.run(prompt, timeout=600)
    outputs = entry["outputs"]
    facts = dict(ast.literal_eval(outputs["2"]["text"][0]))
    assert facts["points"] == 4 and facts["last"] == [3, 9]
    assert facts["shape"] == "triangle", "tinygeom >=1.0 from the channel"
    assert facts["tool"] == "tinygeom 1.2 from conda", "the prefix's bin/ is on PATH"
    assert facts["conda_python_pkg"] == "conda noarch"
    assert facts["cuda_wheel"] == server.local
    assert facts["mode"] == "fast", "[activation.env]"
    prefix = Path(facts["prefix"])
    assert prefix.parent == AIRLOCK_HOME / "envs", prefix
    assert (prefix / "conda-meta").is_dir()
    assert (prefix / "share" / "tinygeom" / "linux.txt").is_file(), "[target.linux-64]"
    plain = outputs["3"]["text"][0]
    assert plain == f"plain from {sys.prefix}", "a folder without comfy-env.toml: in-process"


def test_doctor_lists_the_sub_env(server, comfyui_dir):
    cmd = [sys.executable, "-m", "comfy_airlock.cli", "doctor", "--comfyui", str(comfyui_dir)]
    out = subprocess.run(
        [*cmd, "--base", str(server.base_dir)],
        env={**os.environ, **server.test_env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    text = out.stdout + out.stderr
    assert "comfyenv-pack/geometry [ok]" in text, text
    assert "nodes/geometry/comfy-env.toml" in text, text


def test_from_isolated_nodes_too(server, comfyui_dir, tmp_path):
    """The same pack unchanged in isolated_nodes/ (comfy-airlock's custom node loads it):
    nothing of it is imported in ComfyUI, so its in-process folder is not loaded (and the log
    says so), its env and custom socket work as from custom_nodes/."""
    base = make_base_dir(
        tmp_path,
        custom_nodes={"comfy-airlock": REPO / "custom_node"},
        isolated={"comfyenv-pack": PACK},
    )
    env = {**server.test_env, "AIRLOCK_AUTO_BUILD": "0"}
    with ComfyUI(comfyui_dir, base, env=env) as ui:
        info = ui.object_info()
        assert "GeometryReport" in info and "PlainEcho" not in info
        prompt = {
            "1": {"class_type": "MakeMeshlet", "inputs": {"count": 2}},
            "2": {"class_type": "GeometryReport", "inputs": {"meshlet": ["1", 0]}},
        }
        facts = dict(ast.literal_eval(ui.run(prompt, timeout=600)["outputs"]["2"]["text"][0]))
        assert facts["last"] == [1, 1] and facts["tool"] == "tinygeom 1.2 from conda"
        log = ui.log_text()
        assert "nodes/plain not loaded" in log, log[-3000:]
        assert "ComfyUI-TinyPeer" in log

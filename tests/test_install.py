"""``airlock install`` and the custom node's registry metadata (what ComfyUI-Manager and the
Comfy registry read)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import tomllib
from conftest import ROOT, missing

CUSTOM_NODE = ROOT / "custom_node"


def airlock(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("COMFYUI_DIR", None)
    return subprocess.run(
        [sys.executable, "-m", "comfy_airlock.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def fake_comfyui(tmp_path: Path) -> Path:
    d = tmp_path / "ComfyUI"
    (d / "comfy").mkdir(parents=True)
    (d / "main.py").write_text("")
    return d


def test_install_puts_the_custom_node_and_isolated_nodes_in_place(tmp_path):
    comfy = fake_comfyui(tmp_path)
    r = airlock("install", "--comfyui", str(comfy))
    assert r.returncode == 0, r.stderr
    node = comfy / "custom_nodes" / "comfy-airlock"
    for f in ("__init__.py", "pyproject.toml", "requirements.txt"):
        assert (node / f).read_bytes() == (CUSTOM_NODE / f).read_bytes()
    assert not node.is_symlink()
    assert (comfy / "isolated_nodes").is_dir()
    assert "Next:" in r.stdout and f"airlock isolate PACK --comfyui {comfy}" in r.stdout

    (node / "__init__.py").write_text((node / "__init__.py").read_text() + "# older copy\n")
    r = airlock("install", "--comfyui", str(comfy))
    assert r.returncode == 0, r.stderr
    assert "updated" in r.stdout
    assert (node / "__init__.py").read_bytes() == (CUSTOM_NODE / "__init__.py").read_bytes()
    assert sorted(p.name for p in (comfy / "custom_nodes").iterdir()) == ["comfy-airlock"]


def test_install_leaves_a_folder_that_is_not_ours_alone(tmp_path):
    comfy = fake_comfyui(tmp_path)
    theirs = comfy / "custom_nodes" / "comfy-airlock"
    theirs.mkdir(parents=True)
    (theirs / "__init__.py").write_text("NODE_CLASS_MAPPINGS = {}\n")
    r = airlock("install", "--comfyui", str(comfy))
    assert r.returncode == 1
    assert "is not comfy-airlock's custom node" in r.stderr
    assert (theirs / "__init__.py").read_text() == "NODE_CLASS_MAPPINGS = {}\n"


def test_install_refuses_a_second_copy_under_another_name(tmp_path):
    comfy = fake_comfyui(tmp_path)
    assert airlock("install", "--comfyui", str(comfy)).returncode == 0
    nodes = comfy / "custom_nodes"
    (nodes / "comfy-airlock").rename(nodes / "comfy-airlock-main")
    r = airlock("install", "--comfyui", str(comfy))
    assert r.returncode == 1
    assert "already in" in r.stderr and "comfy-airlock-main" in r.stderr
    assert sorted(p.name for p in nodes.iterdir()) == ["comfy-airlock-main"]


def test_install_refuses_a_folder_that_is_not_comfyui(tmp_path):
    r = airlock("install", "--comfyui", str(tmp_path))
    assert r.returncode == 1
    assert "no custom_nodes/ and no main.py" in r.stderr
    assert list(tmp_path.iterdir()) == []
    r = airlock("install", "--comfyui", str(tmp_path / "missing"))
    assert r.returncode == 1 and "does not exist" in r.stderr


def test_custom_node_carries_registry_metadata_of_this_version():
    package = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    meta = tomllib.loads((CUSTOM_NODE / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "comfy-airlock"
    assert meta["project"]["version"] == package["version"]
    assert set(meta["tool"]["comfy"]) >= {"PublisherId", "DisplayName", "Icon"}
    pin = f"comfy-airlock=={package['version']}"
    assert meta["project"]["dependencies"] == [pin]
    lines = (CUSTOM_NODE / "requirements.txt").read_text().splitlines()
    assert [x for x in lines if x and not x.startswith("#")] == [pin]


def test_custom_node_error_message_says_how_to_install():
    text = (CUSTOM_NODE / "__init__.py").read_text()
    # No instruction that cannot work today: the package is not on PyPI yet.
    assert "pip install comfy-airlock`" not in text
    assert "make wheel" in text and "airlock install" in text


def test_comfyui_reads_the_custom_node_metadata():
    """ComfyUI parses a custom node's pyproject.toml at import (comfy_config); so does Manager."""
    comfyui = Path(os.environ.get("COMFYUI_DIR") or ROOT / ".cache/comfyui/0.30.0/ComfyUI")
    if not (comfyui / "comfy_config").is_dir():
        missing(f"ComfyUI tree {comfyui} is missing: scripts/comfyui.sh makes it")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from comfy_config import config_parser; "
        "c = config_parser.extract_node_configuration(sys.argv[2]); "
        "print(c.project.name, c.project.version, c.tool_comfy.display_name, "
        "c.project.supported_os, c.project.supported_comfyui_version)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(comfyui), str(CUSTOM_NODE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "comfy-airlock 0.1.0 comfy-airlock ['POSIX :: Linux'] >=0.30.0"

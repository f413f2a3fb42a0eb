"""The optional Landlock sandbox (``[sandbox] enabled = true``), tested by a worker that tries
to get out: read a private key and ComfyUI's user folder, write where it may not, read the
host's environment in /proc, signal the host, and reach the network. The same attempts
succeed without the sandbox, so each denial is the sandbox's doing. A pack (and torch and
ComfyUI) still works inside.

Landlock is part of the kernels CI runs on (Linux 6.18 there, ABI 7): without it these tests
fail under CI and are skipped elsewhere (``missing``)."""

from __future__ import annotations

import functools
import json
import os
import socket
import sys
from pathlib import Path

import pytest
from conftest import HELPERS, interpreter, missing

from comfy_airlock import _native, sandbox
from comfy_airlock.host import comfy_state
from comfy_airlock.host import pack as pack_module
from comfy_airlock.host.pack import IsolatedPack
from comfy_airlock.supervisor import Worker

NODES = """
import os, tempfile

class Probe:
    CATEGORY = "test"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "go"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"text": ("STRING", {})}}

    def go(self, text):
        here = os.path.dirname(__file__)
        data = open(os.path.join(here, "data.txt")).read().strip()
        with tempfile.NamedTemporaryFile("w", delete=False) as f:
            f.write(text)
        return (f"{data}:{text}",)

NODE_CLASS_MAPPINGS = {"SandboxProbe": Probe}
"""


@pytest.fixture(autouse=True)
def landlock():
    if _native.landlock_abi() < 4:
        missing("Landlock ABI >= 4 (Linux 6.7) is needed to test the sandbox")


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A ComfyUI-like tree, a pack, a home with a private key, and the host seen as ComfyUI."""
    comfy = tmp_path / "ComfyUI"
    for d in ["comfy", "models/checkpoints", "input", "output", "temp", "user/default"]:
        (comfy / d).mkdir(parents=True)
    (comfy / "custom_nodes" / "other").mkdir(parents=True)
    (comfy / "comfy" / "code.py").write_text("x = 1\n")
    (comfy / "models/checkpoints/model.safetensors").write_bytes(b"weights")
    (comfy / "input/in.png").write_bytes(b"png")
    (comfy / "user/default/comfy.settings.json").write_text('{"api_key": "k"}')
    (comfy / "custom_nodes/other/__init__.py").write_text("secret = 1\n")
    extra_models = tmp_path / "extra-models"
    extra_models.mkdir()
    (extra_models / "lora.safetensors").write_bytes(b"lora")
    pack = comfy / "isolated_nodes" / "probe-pack"
    pack.mkdir(parents=True)
    (pack / "__init__.py").write_text(NODES)
    (pack / "data.txt").write_text("packdata")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh/id_rsa").write_text("PRIVATE KEY")
    folders = {
        "base_path": str(comfy),
        "models_dir": str(comfy / "models"),
        "output_directory": str(comfy / "output"),
        "temp_directory": str(comfy / "temp"),
        "input_directory": str(comfy / "input"),
        "user_directory": str(comfy / "user"),
        "folder_names_and_paths": {
            "checkpoints": [[str(comfy / "models/checkpoints")], [".safetensors"]],
            "loras": [[str(extra_models)], [".safetensors"]],
            "custom_nodes": [[str(comfy / "custom_nodes")], []],
        },
    }
    monkeypatch.setattr(comfy_state, "comfyui_dir", lambda: str(comfy))
    monkeypatch.setattr(comfy_state, "folder_paths_snapshot", lambda: folders)
    monkeypatch.setattr(pack_module, "Worker", functools.partial(Worker, sys_path=[HELPERS]))
    return {"comfy": comfy, "pack": pack, "home": home, "extra": extra_models}


@pytest.fixture
def make_pack(world):
    made = []

    def make(python: str = sys.executable, **sandbox_cfg) -> IsolatedPack:
        p = IsolatedPack(
            name="probe-pack",
            dir=str(world["pack"]),
            python=python,
            env_dir=str(Path(python).parent.parent),
            env_key="test",
            sandbox=sandbox_cfg,
        )
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


@pytest.fixture
def comfyui_tree() -> Path:
    from comfyui.harness import DEFAULT_COMFYUI_DIR

    path = Path(os.environ.get("COMFYUI_DIR") or DEFAULT_COMFYUI_DIR)
    if not (path / "main.py").is_file():
        missing(f"ComfyUI tree {path} is missing: scripts/comfyui.sh makes it")
    return path


@pytest.fixture
def listener():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield s.getsockname()[1]
    s.close()


def escapes(world, port):
    c, home = world["comfy"], world["home"]
    return {
        "read private key": ("read", str(home / ".ssh/id_rsa")),
        "read ComfyUI user settings": ("read", str(c / "user/default/comfy.settings.json")),
        "read another pack": ("read", str(c / "custom_nodes/other/__init__.py")),
        "read host environ": ("read", f"/proc/{os.getpid()}/environ"),
        "list home": ("list", str(home)),
        "write into the pack": ("write", str(world["pack"] / "planted.py")),
        "write into models": ("write", str(c / "models/checkpoints/evil.safetensors")),
        "write into home": ("write", str(home / ".bashrc")),
        "signal the host": ("signal", os.getpid()),
    } | ({"tcp connect": ("tcp", port), "udp send": ("udp", port)} if port else {})


def allowed(world):
    c = world["comfy"]
    return {
        "read the pack": ("read", str(world["pack"] / "data.txt")),
        "read ComfyUI code": ("read", str(c / "comfy/code.py")),
        "list ComfyUI": ("list", str(c)),
        "read a checkpoint": ("read", str(c / "models/checkpoints/model.safetensors")),
        "read an extra model folder": ("read", str(world["extra"] / "lora.safetensors")),
        "read an input": ("read", str(c / "input/in.png")),
        "write an output": ("write", str(c / "output/out.png")),
        "write temp": ("write", str(c / "temp/t.png")),
        "use its temp dir": ("tmp", None),
        "run a system program": ("exec", "/bin/true"),
    }


def run(p: IsolatedPack, cases: dict) -> dict[str, str]:
    got = p.worker().call("airlock_escape:attempts", list(cases.values()))
    return dict(zip(cases, got, strict=True))


def test_escapes_are_denied_and_the_allowed_still_works(world, make_pack, listener):
    p = make_pack(enabled=True, network=False)
    denied = run(p, escapes(world, listener))
    assert denied == {
        k: "denied EPERM" if k == "signal the host" else "denied EACCES" for k in denied
    }, denied
    assert run(p, allowed(world)) == dict.fromkeys(allowed(world), "ok")
    assert not (world["home"] / ".bashrc").exists()
    assert not (world["pack"] / "planted.py").exists()


def test_without_the_sandbox_the_same_attempts_succeed(world, make_pack, listener):
    p = make_pack()  # no [sandbox]
    got = run(p, escapes(world, listener))
    assert got == dict.fromkeys(got, "ok"), got


def test_network_stays_on_unless_turned_off(world, make_pack, listener):
    p = make_pack(enabled=True)
    got = run(p, {"tcp": ("tcp", listener), "udp": ("udp", listener)})
    assert got == {"tcp": "ok", "udp": "ok"}
    assert run(p, {"key": escapes(world, 0)["read private key"]}) == {"key": "denied EACCES"}


def test_extra_read_and_write_paths(world, make_pack):
    home = world["home"]
    (home / "cache").mkdir()
    (home / "cache/hub.bin").write_text("x")
    p = make_pack(enabled=True, read=[str(home / "cache")], write=[str(home / "scratch")])
    (home / "scratch").mkdir()
    got = run(
        p,
        {
            "read cache": ("read", str(home / "cache/hub.bin")),
            "write cache": ("write", str(home / "cache/new")),
            "write scratch": ("write", str(home / "scratch/new")),
            "read key": ("read", str(home / ".ssh/id_rsa")),
        },
    )
    assert got == {
        "read cache": "ok",
        "write cache": "denied EACCES",
        "write scratch": "ok",
        "read key": "denied EACCES",
    }


def test_the_pack_runs_inside(world, make_pack):
    p = make_pack(enabled=True, network=False)
    meta = p.scan()
    assert "SandboxProbe" in meta["nodes"]
    out = p.run("SandboxProbe", "1", "go", ({"text": "hi"}, None))
    assert out == ("packdata:hi",)


def test_torch_and_comfyui_work_inside(make_pack, monkeypatch, comfyui_tree):
    """The real ComfyUI tree and torch under the sandbox: imports, a computation, folders."""
    folders = {
        "base_path": str(comfyui_tree),
        "models_dir": str(comfyui_tree / "models"),
        "output_directory": str(comfyui_tree / "output"),
        "temp_directory": str(comfyui_tree / "temp"),
        "input_directory": str(comfyui_tree / "input"),
        "user_directory": str(comfyui_tree / "user"),
        "folder_names_and_paths": {
            "checkpoints": [[str(comfyui_tree / "models/checkpoints")], [".safetensors"]]
        },
    }
    monkeypatch.setattr(comfy_state, "comfyui_dir", lambda: str(comfyui_tree))
    monkeypatch.setattr(comfy_state, "folder_paths_snapshot", lambda: folders)
    p = make_pack(enabled=True, network=False)
    got = p.worker().call("airlock_escape:torch_and_comfy")
    assert got["sum"] == 3920.0 and got["device"] == "cpu"
    assert got["output"] == folders["output_directory"]
    host_environ = ("read", f"/proc/{os.getpid()}/environ")
    assert p.worker().call("airlock_escape:attempt", *host_environ) == "denied EACCES"


def test_an_older_torch_env_works_inside(world, make_pack):
    p = make_pack(interpreter("py312"), enabled=True, network=False)
    assert (
        p.worker().call("airlock_escape:attempt", "read", str(world["pack"] / "data.txt")) == "ok"
    )
    assert p.worker().call("torch:__version__.__str__")


def test_rules_name_the_pack_and_skip_private_comfyui_folders(world):
    rules = json.loads(
        sandbox.host_rules(
            "probe-pack",
            {"enabled": True, "network": False, "read": ["~/x"], "write": []},
            pack_dir=str(world["pack"]),
            env_dir=sys.prefix,
            comfyui_dir=str(world["comfy"]),
            folder_paths=comfy_state.folder_paths_snapshot(),
        )
    )
    c = world["comfy"]
    assert str(c / "comfy") in rules["read"] and str(c / "user") not in rules["read"]
    assert str(c / "custom_nodes") not in rules["read"]
    assert rules["list"] == [str(c)]
    assert os.path.expanduser("~/x") in rules["read"]
    assert rules["write"] == [str(c / "output"), str(c / "temp")]
    assert rules["network"] is False
    assert (
        sandbox.host_rules(
            "p", {"enabled": False}, pack_dir="/", env_dir="/", comfyui_dir=None, folder_paths=None
        )
        is None
    )

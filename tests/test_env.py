"""Pack configs, discovery, environments (built by the real uv) and the ``airlock`` command.

Every test has its own environment home; uv's own cache is shared, so after the first run the
builds take well under a second each (``six`` and ``idna`` are small pure-Python wheels).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, missing

import comfy_airlock
from comfy_airlock import env as airlock_env
from comfy_airlock import settings


def _uv() -> str | None:
    cand = os.environ.get("AIRLOCK_UV") or str(ROOT / ".venv" / "bin" / "uv")
    if os.path.exists(cand):
        return cand
    return shutil.which("uv")


@pytest.fixture
def uv() -> str:
    found = _uv()
    if found is None:
        missing("uv is missing from .venv")
    return found


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def write_pack(root: Path, name: str, files: dict[str, str]) -> Path:
    pack = root / name
    for rel, text in files.items():
        p = pack / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return pack


def fake_comfyui(tmp_path: Path) -> Path:
    """A folder `airlock` recognizes as ComfyUI: main.py, comfy/ and a requirements.txt."""
    comfyui = tmp_path / "ComfyUI"
    (comfyui / "comfy").mkdir(parents=True)
    (comfyui / "main.py").write_text("")
    (comfyui / "requirements.txt").write_text("comfyui-frontend-package==1.28.8\nsix\n")
    return comfyui


# --- configs and discovery -------------------------------------------------------------------


def test_exception_classes_are_exported():
    assert issubclass(comfy_airlock.EnvError, comfy_airlock.AirlockError)
    assert issubclass(comfy_airlock.ConfigError, comfy_airlock.EnvError)
    assert issubclass(comfy_airlock.EnvMissing, comfy_airlock.EnvError)
    assert airlock_env.ConfigError is comfy_airlock.ConfigError


def test_pack_config(tmp_path: Path):
    pack = write_pack(
        tmp_path,
        "depth",
        {
            "airlock.toml": 'python = "3.10"\ndependencies = ["numpy<2"]\n'
            'find-links = ["wheels"]\nentry = "nodes"\n\n[env_vars]\nA = "1"\n'
        },
    )
    c = airlock_env.pack_config(pack)
    assert c["name"] == "depth"
    assert c["format"] == "airlock.toml"
    assert c["python"] == "3.10"
    assert c["dependencies"] == ["numpy<2"]
    assert c["find_links"] == [str(pack / "wheels")]
    assert c["entry"] == "nodes"
    assert c["env_vars"] == {"A": "1"}
    assert c["comfy"] is None


def test_config_errors_name_pack_file_key_and_line(tmp_path: Path):
    pack = write_pack(tmp_path, "typo", {"airlock.toml": 'python = "3.10"\ndependecies = []\n'})
    with pytest.raises(comfy_airlock.ConfigError) as ei:
        airlock_env.pack_config(pack)
    msg = str(ei.value)
    assert msg.startswith("typo: ")
    assert "airlock.toml:2: unknown key `dependecies`" in msg
    assert ei.value.pack == "typo"

    # What comfy-env itself refuses is refused by name (conda and [cuda] are read: ADR 0024).
    pixi = write_pack(tmp_path, "pixi", {"comfy-env.toml": '[environments]\ngpu = ["x"]\n'})
    with pytest.raises(comfy_airlock.ConfigError, match=r"\[environments\] is not supported"):
        airlock_env.pack_config(pixi)
    conda = write_pack(tmp_path, "conda", {"comfy-env.toml": '[dependencies]\nmesalib = "*"\n'})
    assert airlock_env.pack_config(conda)["conda"] == ["mesalib *"]


def test_discover_packs_keeps_going_past_a_broken_pack(tmp_path: Path, monkeypatch):
    base = tmp_path / "ComfyUI"
    write_pack(base / "isolated_nodes", "good", {"airlock.toml": 'dependencies = ["six"]\n'})
    write_pack(base / "isolated_nodes", "broken", {"airlock.toml": "nope = 1\n"})
    write_pack(base / "isolated_nodes", "off.disabled", {"airlock.toml": ""})
    write_pack(tmp_path / "more", "extra", {"comfy-env.toml": 'python = "3.11"\n'})
    write_pack(
        base / "custom_nodes",
        "optin",
        {"airlock.toml": "", "__init__.py": "from comfy_airlock import register_nodes\n"},
    )
    write_pack(base / "custom_nodes", "plain", {"airlock.toml": "", "__init__.py": ""})
    write_pack(base / "custom_nodes", "ordinary", {"__init__.py": ""})
    # The packs_path setting (AIRLOCK_PACKS_PATH, read once per process).
    monkeypatch.setattr(settings.get(), "packs_path", (str(tmp_path / "more"),))

    found = {p["name"]: p for p in airlock_env.discover_packs(base)}
    assert sorted(found) == ["broken", "extra", "good", "optin", "plain"]
    assert found["good"]["config"]["dependencies"] == ["six"]
    assert found["good"]["error"] is None and found["good"]["placement"] == "managed"
    assert found["broken"]["config"] is None
    assert found["broken"]["error"].startswith("broken: ")
    assert "unknown key `nope`" in found["broken"]["error"]
    assert found["extra"]["config"]["python"] == "3.11"
    assert found["optin"]["placement"] == "custom_nodes" and found["optin"]["opted_in"]
    assert not found["plain"]["opted_in"]
    # Explicit roots replace AIRLOCK_PACKS_PATH.
    assert "extra" not in {p["name"] for p in airlock_env.discover_packs(base, [])}


# --- environments ----------------------------------------------------------------------------


# Whether a module's bytecode is in its __pycache__, read before importing it.
_CACHED = (
    "import importlib.util, os; "
    "spec = importlib.util.find_spec({module!r}); "
    "print(os.path.exists(importlib.util.cache_from_source(spec.origin)))"
)


def test_ensure_env_builds_once_then_reuses(tmp_path: Path, home: Path, uv: str):
    # comfy = false: only what the pack lists (ComfyUI's requirements are the default now).
    pack = write_pack(tmp_path, "tiny", {"airlock.toml": 'comfy = false\ndependencies = ["six"]\n'})
    lines: list[str] = []
    info = airlock_env.ensure_env(pack, home=home, uv=uv, progress=lines.append)
    assert info["built"] is True
    assert info["name"] == "tiny"
    assert Path(info["python"]).is_relative_to(home / "envs")
    assert Path(info["lock_path"]).read_text().count("six==") == 1
    assert Path(info["log_path"]).exists()
    assert any(line.startswith("tiny: resolving") for line in lines), lines
    assert "tiny: installing 1 package" in lines
    # Compiled at install (asked before any import could write it): a worker where
    # PYTHONDONTWRITEBYTECODE is set does not compile the env's modules at each start.
    compiled = subprocess.run(
        [info["python"], "-c", _CACHED.format(module="six")],
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert compiled.stdout.strip() == "True", compiled.stdout
    subprocess.run([info["python"], "-c", "import six"], check=True)

    again = airlock_env.ensure_env(pack, home=home, uv=uv, progress=lines.append)
    assert again["built"] is False
    assert again["key"] == info["key"]
    assert airlock_env.ensure_env(pack, home=home, uv=uv, build=False)["python"] == info["python"]

    (pack / "airlock.toml").write_text('comfy = false\ndependencies = ["six", "idna"]\n')
    with pytest.raises(comfy_airlock.EnvMissing, match=r"^tiny: .*run `airlock build`"):
        airlock_env.ensure_env(pack, home=home, uv=uv, build=False)
    changed = airlock_env.ensure_env(pack, home=home, uv=uv)
    assert changed["built"] and changed["key"] != info["key"]
    subprocess.run([changed["python"], "-c", "import idna, six"], check=True)


def test_ensure_env_error_names_the_requirement(tmp_path: Path, home: Path, uv: str):
    pack = write_pack(
        tmp_path,
        "badreq",
        {"airlock.toml": 'dependencies = ["six", "airlock-no-such-package-xyz==1.0"]\n'},
    )
    with pytest.raises(comfy_airlock.EnvError) as ei:
        airlock_env.ensure_env(pack, home=home, uv=uv)
    e = ei.value
    assert not isinstance(e, comfy_airlock.EnvMissing)
    assert str(e).startswith("badreq: resolving its requirements failed")
    assert e.requirement == "airlock-no-such-package-xyz==1.0"
    assert any("airlock-no-such-package-xyz" in line for line in e.uv_message)
    assert e.log_path and Path(e.log_path).exists()


def test_python_that_does_not_exist(tmp_path: Path, home: Path, uv: str):
    pack = write_pack(tmp_path, "oldpy", {"airlock.toml": 'python = "3.4"\n'})
    with pytest.raises(
        comfy_airlock.EnvError, match=r'^oldpy: no Python interpreter found for python = "3.4"'
    ):
        airlock_env.ensure_env(pack, home=home, uv=uv)


def test_comfy_import_adds_comfyui_requirements(tmp_path: Path, home: Path, uv: str, monkeypatch):
    monkeypatch.delenv("COMFYUI_DIR", raising=False)
    comfyui = fake_comfyui(tmp_path)
    pack = write_pack(
        tmp_path, "usescomfy", {"airlock.toml": "", "nodes.py": "import comfy.utils\n"}
    )
    with pytest.raises(comfy_airlock.EnvError, match="imports ComfyUI"):
        airlock_env.ensure_env(pack, home=home, uv=uv, comfyui_dir=None)
    info = airlock_env.ensure_env(pack, home=home, uv=uv, comfyui_dir=comfyui)
    assert info["comfy"] is True
    lock = Path(info["lock_path"]).read_text()
    assert "six==" in lock and "frontend" not in lock


# --- the airlock command ---------------------------------------------------------------------


def airlock(*args: str, cwd: Path, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    script = ROOT / ".venv" / "bin" / "airlock"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "comfy_airlock.cli"]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRLOCK_", "COMFYUI_"))}
    full_env.update(AIRLOCK_HOME=str(home), **env)
    return subprocess.run(
        [*cmd, *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=300
    )


def test_cli_help(tmp_path: Path, home: Path):
    r = airlock("--help", cwd=tmp_path, home=home)
    assert r.returncode == 0
    for cmd in ("build", "doctor", "gc"):
        assert cmd in r.stdout


def test_cli_build_doctor_gc(tmp_path: Path, home: Path, uv: str):
    comfyui = fake_comfyui(tmp_path)
    nodes = comfyui / "isolated_nodes"
    good = write_pack(nodes, "good", {"airlock.toml": 'dependencies = ["six"]\n'})
    write_pack(nodes, "broken", {"airlock.toml": 'python = "3.10"\ndependecies = ["six"]\n'})

    # build: goes past the broken pack, names it, exits 1.
    r = airlock("build", cwd=comfyui, home=home)
    assert r.returncode == 1, r.stderr
    assert "good: built:" in r.stdout
    assert "1 failed: broken" in r.stdout
    assert "broken: " in r.stderr and "unknown key `dependecies`" in r.stderr
    assert "good: installing 1 package" in r.stderr  # phase lines when not a terminal

    # doctor: names the broken pack and exits 1; the good one is current.
    r = airlock("doctor", cwd=comfyui, home=home)
    assert r.returncode == 1
    assert "broken [NOT READY]" in r.stdout
    assert "good [ok]" in r.stdout
    assert "torch      not installed" in r.stdout
    r = airlock("doctor", "--json", "--comfyui", str(comfyui), cwd=tmp_path, home=home)
    report = json.loads(r.stdout)
    packs = {p["name"]: p for p in report["packs"]}
    assert packs["good"]["env"] == "current" and packs["good"]["ready"]
    assert packs["good"]["probe"]["torch"] is None
    assert not packs["broken"]["config_ok"] and not report["ready"]
    assert isinstance(report["nvml"], bool)
    # The kernel's Landlock, as the sandbox itself reads it.
    from comfy_airlock import _native

    assert report["landlock"]["abi"] == _native.landlock_abi()

    # Fixed, built again: all ready; a second build is a no-op.
    shutil.rmtree(nodes / "broken")
    assert airlock("build", cwd=comfyui, home=home).returncode == 0
    r = airlock("build", "good", cwd=comfyui, home=home)
    assert r.returncode == 0 and "good: up to date" in r.stdout
    assert airlock("doctor", cwd=comfyui, home=home).returncode == 0

    # gc: after a change, the old env is listed (dry run), then removed with --delete.
    old_env = next((home / "envs").iterdir())
    (good / "airlock.toml").write_text('dependencies = ["idna"]\n')
    assert airlock("build", cwd=comfyui, home=home).returncode == 0
    r = airlock("gc", cwd=comfyui, home=home)
    assert r.returncode == 0
    assert str(old_env) in r.stdout and "dry run" in r.stdout
    assert old_env.exists()
    r = airlock("gc", "--delete", cwd=comfyui, home=home)
    assert r.returncode == 0 and f"removed {old_env}" in r.stdout
    assert not old_env.exists()
    assert len(list((home / "envs").iterdir())) == 1
    assert "nothing to collect" in airlock("gc", cwd=comfyui, home=home).stdout


def test_cli_doctor_reports_a_cached_import_failure(tmp_path: Path, home: Path, uv: str):
    """doctor reads what ComfyUI's last start cached for the pack's current content (written
    here by the host's own scan_cache functions): a failed import makes the pack not ready,
    with the worker's traceback and a hint for an import error; no entry says "not read yet"
    and judges nothing; an edit to the pack is a new key."""
    from comfy_airlock.host import scan_cache

    comfyui = fake_comfyui(tmp_path)
    nodes = comfyui / "isolated_nodes"
    pack = write_pack(nodes, "imp", {"airlock.toml": 'dependencies = ["six"]\n'})
    (pack / "__init__.py").write_text("import nowhere\n")
    assert airlock("build", cwd=comfyui, home=home).returncode == 0

    r = airlock("doctor", "--json", cwd=comfyui, home=home)
    assert r.returncode == 0, r.stdout + r.stderr
    (row,) = json.loads(r.stdout)["packs"]
    assert row["nodes"] == "not_read" and row["ready"] and row["fix"] is None
    key = scan_cache.key(str(pack), row["key"], str(comfyui))
    assert row["scan_file"] == str(home / "scans" / f"{key}.json")

    err = ModuleNotFoundError("No module named 'nowhere'")
    err.remote_traceback = (  # type: ignore[attr-defined]
        'Traceback (most recent call last):\n  File "imp/__init__.py", line 1, in <module>\n'
        "ModuleNotFoundError: No module named 'nowhere'\n"
    )
    scan_cache.store(home / "scans", key, {"failed": scan_cache.failure_of(err)})
    r = airlock("doctor", cwd=comfyui, home=home)
    assert r.returncode == 1
    assert "imp [NOT READY]" in r.stdout and "nodes      FAILED to import" in r.stdout
    assert "ModuleNotFoundError: No module named 'nowhere'" in r.stdout
    assert 'File "imp/__init__.py", line 1' in r.stdout
    assert "imp: fix the import error" in r.stdout and "airlock build" not in r.stdout
    report = json.loads(airlock("doctor", "--json", cwd=comfyui, home=home).stdout)
    (row,) = report["packs"]
    assert row["import_error"]["type"] == "ModuleNotFoundError" and not report["ready"]

    # A cached success, then an edit: read, then not read yet (the failure was for old code).
    scan_cache.store(home / "scans", key, {"nodes": {}})
    r = airlock("doctor", cwd=comfyui, home=home)
    assert r.returncode == 0 and "read at ComfyUI's last start" in r.stdout
    scan_cache.store(home / "scans", key, {"failed": scan_cache.failure_of(err)})
    (pack / "__init__.py").write_text("import six\n")
    r = airlock("doctor", cwd=comfyui, home=home)
    assert r.returncode == 0 and "not read yet" in r.stdout


def test_cli_doctor_names_a_groups_packs_and_a_member_that_failed(tmp_path: Path, home: Path):
    """ADR 0054: a group is one pack to doctor, its packs listed; a member whose import failed
    at ComfyUI's last start (the others loaded) makes it not ready, named with its error."""
    from comfy_airlock.host import scan_cache

    comfyui = fake_comfyui(tmp_path)
    files = {
        "airlock.toml": 'packs = ["core", "extras"]\n',
        "core/__init__.py": "NODE_CLASS_MAPPINGS = {}\n",
        "extras/__init__.py": "import nowhere\n",
        "extras/requirements.txt": "six\n",
    }
    group = write_pack(comfyui / "isolated_nodes", "grp", files)
    assert airlock("build", cwd=comfyui, home=home).returncode == 0
    r = airlock("doctor", cwd=comfyui, home=home)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "packs      core, extras (a group: one env, one worker)" in r.stdout
    (row,) = json.loads(airlock("doctor", "--json", cwd=comfyui, home=home).stdout)["packs"]
    assert row["members"] == ["core", "extras"]

    failure = {"error": "No module named 'nowhere'", "type": "ModuleNotFoundError"}
    members = {"core": {"web_directory": None, "failed": None}, "extras": {"failed": failure}}
    key = scan_cache.key(str(group), row["key"], str(comfyui))
    scan_cache.store(home / "scans", key, {"nodes": {}, "members": members})
    r = airlock("doctor", cwd=comfyui, home=home)
    assert r.returncode == 1
    assert "grp [NOT READY]" in r.stdout and "read at ComfyUI's last start" in r.stdout
    assert "grp/extras" in r.stdout and "No module named 'nowhere'" in r.stdout
    assert "grp: fix the import error" in r.stdout


def test_cli_doctor_hints_fit_the_cause(tmp_path: Path, home: Path):
    comfyui = fake_comfyui(tmp_path)
    nodes = comfyui / "isolated_nodes"
    write_pack(nodes, "badconf", {"airlock.toml": "dependecies = []\n"})
    write_pack(nodes, "unbuilt", {"airlock.toml": 'dependencies = ["six"]\n'})
    r = airlock("doctor", cwd=comfyui, home=home)
    assert r.returncode == 1
    hints = r.stdout.split("not ready:", 1)[1]
    assert "badconf: fix its config" in hints
    assert "unbuilt: run `airlock build` to build its environment" in hints
    assert "badconf: run `airlock build`" not in hints


def test_cli_without_comfyui_says_where_to_point_it(tmp_path: Path, home: Path):
    r = airlock("doctor", cwd=tmp_path, home=home)
    assert r.returncode == 2
    assert "--comfyui" in r.stderr

"""The comfy_env shim beside a real comfy-env, and the errors a comfy-env pack's author sees
when a conda channel or a [cuda] wheel cannot be had (ADRs 0024, 0025)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from comfy_airlock import compat, env

PROBE = "import comfy_env, sys; print(comfy_env.__file__); print(sys.path.index({shim!r}))"


def _run(code: str, *flags: str, **env_extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *flags, "-c", code],
        env={**os.environ, **env_extra},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_ours_answers_only_where_no_comfy_env_is_installed(tmp_path):
    shim = compat.shim_dir()
    setup = f"import sys; sys.path.append({shim!r}); "
    ours = _run(setup + PROBE.format(shim=shim))
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.splitlines()[0].startswith(shim)
    # A real comfy-env (here on PYTHONPATH, as site-packages or any earlier entry) wins.
    real = tmp_path / "site" / "comfy_env"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("REAL = True\n")
    theirs = _run(setup + PROBE.format(shim=shim), PYTHONPATH=str(tmp_path / "site"))
    assert theirs.returncode == 0, theirs.stderr
    assert theirs.stdout.splitlines()[0] == str(real / "__init__.py")


def test_the_pth_file_appends_the_shim_after_site_packages(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    pth = compat.install_pth(str(site))
    assert pth.read_text().strip() == compat.shim_dir()
    shim = compat.shim_dir()
    code = (
        f"import site, sys; site.addsitedir({str(site)!r}); "
        f"print(sys.path.index({shim!r}) > sys.path.index({str(site)!r}))"
    )
    out = _run(code, "-S")  # no site-packages yet: only the one this test makes
    assert out.stdout.strip() == "True", out.stderr


def _comfy_env_pack(root: Path, toml: str) -> Path:
    pack = root / "MyPack"
    sub = pack / "nodes" / "mesh"
    sub.mkdir(parents=True)
    (pack / "__init__.py").write_text("from comfy_env import register_nodes\n")
    (sub / "__init__.py").write_text("")
    (sub / "comfy-env.toml").write_text(textwrap.dedent(toml))
    return pack


def _ensure(pack: Path, home: Path) -> str:
    config = env.comfy_env_configs(pack)[0]
    with pytest.raises(env.EnvError) as e:
        env.ensure_env(pack, home=home, build=True, config=config, progress=lambda _l: None)
    return str(e.value)


def test_an_unreachable_channel_names_the_pack_channel_and_package(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRLOCK_CONDA_CHANNEL_ALIAS", str(tmp_path / "no-channels"))
    pack = _comfy_env_pack(tmp_path, '[dependencies]\ncgal = "*"\n')
    msg = _ensure(pack, tmp_path / "home")
    assert msg.startswith("MyPack/mesh: conda channel conda-forge"), msg
    assert "cannot be reached while looking for cgal" in msg, msg


def test_a_missing_cuda_wheel_says_what_was_looked_for(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRLOCK_CUDA_WHEELS", str(tmp_path / "wheels"))
    monkeypatch.setenv("AIRLOCK_CUDA_VERSION", "12.8")
    (tmp_path / "wheels" / "flash-attn").mkdir(parents=True)
    pack = _comfy_env_pack(tmp_path, '[cuda]\npackages = ["flash-attn"]\n')
    msg = _ensure(pack, tmp_path / "home")
    assert "MyPack/mesh: [cuda] flash-attn: no prebuilt wheel of flash-attn" in msg, msg
    assert "CUDA 12.8 (+cu128)" in msg and f"cp{sys.version_info[0]}{sys.version_info[1]}" in msg, (
        msg
    )
    assert str(tmp_path / "wheels") in msg, msg


def test_plan_resolves_each_requirement_or_names_what_stopped_it(tmp_path):
    """``airlock plan``: every conda, PyPI and ``[cuda]`` requirement of each env resolved, or its
    error naming the registry; nothing installed (what bench/comfyenv_heldout.py runs on real
    packs)."""
    from importlib.metadata import version

    from conda_channel import Package, make_channel, make_wheel

    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    make_channel(
        tmp_path / "channels" / "conda-forge",
        [
            Package("python", f"{py}.99", subdir="linux-64"),
            Package("tinygeom", "1.0", files={"share/tinygeom.txt": "1\n"}),
        ],
    )
    torch = ".".join(version("torch").split("+")[0].split(".")[:2])
    cp = f"cp{py.replace('.', '')}"
    make_wheel(
        tmp_path / "cuda" / "tinycuda",
        "tinycuda",
        f"0.1+cu128torch{torch}",
        f"{cp}-{cp}-linux_x86_64",
        {"tinycuda/__init__.py": ""},
    )
    make_wheel(tmp_path / "pypi", "tinypure", "1.0", "py3-none-any", {"tinypure/__init__.py": ""})
    base = tmp_path / "base"
    pack = _comfy_env_pack(
        base / "isolated_nodes",
        """\
        [dependencies]
        tinygeom = ">=1.0"
        [pypi-dependencies]
        tinypure = "*"
        [cuda]
        packages = ["tinycuda"]
        """,
    )
    (pack / "nodes" / "far").mkdir()
    (pack / "nodes" / "far" / "__init__.py").write_text("")
    (pack / "nodes" / "far" / "comfy-env.toml").write_text(
        '[workspace]\nchannels = ["nowhere"]\n[dependencies]\ncgal = "*"\n'
        '[pypi-dependencies]\nnosuchdist-airlock = "*"\n[cuda]\npackages = ["nocuda"]\n'
    )
    out = subprocess.run(
        [sys.executable, "-m", "comfy_airlock.cli", "--home", str(tmp_path / "home"), "plan",
         "--base", str(base), "--json"],
        env={
            **os.environ,
            "AIRLOCK_CONDA_CHANNEL_ALIAS": str(tmp_path / "channels"),
            "AIRLOCK_CUDA_WHEELS": str(tmp_path / "cuda"),
            "AIRLOCK_CUDA_VERSION": "12.8",
            "UV_NO_INDEX": "1",
            "UV_FIND_LINKS": str(tmp_path / "pypi"),
        },
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr
    import json

    envs = {e["name"]: e for e in json.loads(out.stdout)["envs"]}
    assert sorted(envs) == ["MyPack/far", "MyPack/mesh"], out.stdout
    ok, far = envs["MyPack/mesh"], envs["MyPack/far"]
    assert ok["refused"] is None and far["refused"] is None
    got = {o["requirement"]: o for o in ok["conda"] + ok["pypi"] + ok["cuda"]}
    assert got["tinygeom >=1.0"]["resolved"].startswith("1.0 "), got
    assert got[f"python {py}.*"]["resolved"].startswith(f"{py}.99 "), got
    assert got["tinypure"]["resolved"] == "1.0", got
    assert got["tinycuda"]["resolved"].endswith(
        f"tinycuda-0.1+cu128torch{torch}-{cp}-{cp}-linux_x86_64.whl"
    ), got
    for o in far["conda"]:
        assert "conda channel nowhere" in o["error"] and "looking for cgal" in o["error"], o
    assert "nosuchdist-airlock" in far["pypi"][0]["error"], far["pypi"]
    assert "no prebuilt wheel of nocuda" in far["cuda"][0]["error"], far["cuda"]
    assert not (tmp_path / "home" / "envs").exists() or not any(
        (tmp_path / "home" / "envs").iterdir()
    )

"""Tiny conda channels and [cuda] wheels made at test time (conda-forge and comfy-env's wheel
index are not reachable from test machines). Packages are written as ``.tar.bz2`` archives
with fixed timestamps and indexed with rattler_index (py-rattler), so the same contents give
the same channel, the same solve and the same environment key on every run."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import sys
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Package:
    name: str
    version: str
    subdir: str = "noarch"  # or "linux-64"
    depends: list[str] = field(default_factory=list)
    files: dict[str, str | bytes] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    noarch_python: bool = False
    executable: tuple[str, ...] = ()


def python_standing_for(base: str, version: str) -> Package:
    """A ``python`` package that makes its prefix a venv of the interpreter ``base``: a real
    CPython conda package cannot be downloaded here. Solving, linking, uv into the prefix and
    the worker running it are what a real one gets."""
    minor = ".".join(version.split(".")[:2])
    return Package(
        "python",
        version,
        subdir="linux-64",
        links={"bin/python": base, "bin/python3": base, f"bin/python{minor}": base},
        files={
            "pyvenv.cfg": f"home = {os.path.dirname(base)}\n"
            f"include-system-site-packages = false\nversion = {version}\n",
            f"lib/python{minor}/site-packages/_test_channel_python.pth": "",
        },
    )


def host_base_python() -> str:
    """The interpreter behind this venv's ``python``."""
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 1_700_000_000, mode
    tar.addfile(info, io.BytesIO(data))


def _archive(p: Package) -> bytes:
    paths, files = [], []
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:bz2") as tar:
        for rel, content in sorted(p.files.items()):
            data = content.encode() if isinstance(content, str) else content
            mode = 0o755 if rel in p.executable else 0o644
            _add(tar, rel, data, mode)
            paths.append(
                {
                    "_path": rel,
                    "path_type": "hardlink",
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "size_in_bytes": len(data),
                }
            )
            files.append(rel)
        for rel, target in sorted(p.links.items()):
            info = tarfile.TarInfo(rel)
            info.type, info.linkname, info.mtime = tarfile.SYMTYPE, target, 1_700_000_000
            tar.addfile(info)
            paths.append({"_path": rel, "path_type": "softlink"})
            files.append(rel)
        index = {
            "name": p.name,
            "version": p.version,
            "build": "0",
            "build_number": 0,
            "depends": p.depends,
            "license": "MIT",
            "subdir": p.subdir,
            "timestamp": 1_700_000_000_000,
        }
        if p.subdir == "noarch":
            index["noarch"] = "python" if p.noarch_python else "generic"
        else:
            index.update(arch="x86_64", platform="linux")
        _add(tar, "info/index.json", json.dumps(index).encode())
        _add(tar, "info/paths.json", json.dumps({"paths": paths, "paths_version": 1}).encode())
        _add(tar, "info/files", "".join(f"{f}\n" for f in files).encode())
    return buf.getvalue()


def make_channel(channel: Path, packages: list[Package]) -> Path:
    """Writes ``packages`` into the channel folder and indexes it; returns the folder."""
    from rattler.index import index_fs

    (channel / "noarch").mkdir(parents=True, exist_ok=True)
    changed = not (channel / "noarch" / "repodata.json").is_file()
    for p in packages:
        sub = channel / p.subdir
        sub.mkdir(parents=True, exist_ok=True)
        target = sub / f"{p.name}-{p.version}-0.tar.bz2"
        data = _archive(p)
        if not target.is_file() or target.read_bytes() != data:
            target.write_bytes(data)
            changed = True
    # The index records when it was made: re-indexing unchanged packages would change it.
    if changed:
        asyncio.run(index_fs(channel, write_zst=False, write_shards=False, force=True))
    return channel


def make_wheel(folder: Path, dist: str, version: str, tag: str, module: dict[str, str]) -> Path:
    """A wheel named ``<dist>-<version>-<tag>.whl`` holding ``module`` (path -> text)."""
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{dist}-{version}-{tag}.whl"
    info = f"{dist}-{version}.dist-info"
    entries = dict(module)
    entries[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
    entries[f"{info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: false\nTag: {tag}\n"
    )
    record = "".join(f"{p},,\n" for p in entries) + f"{info}/RECORD,,\n"
    entries[f"{info}/RECORD"] = record
    path = folder / name
    with zipfile.ZipFile(path, "w") as z:
        for p, text in sorted(entries.items()):
            z.writestr(zipfile.ZipInfo(p, date_time=(2024, 1, 1, 0, 0, 0)), text)
    return path

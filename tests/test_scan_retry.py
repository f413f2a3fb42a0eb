"""A node whose ``INPUT_TYPES`` raised when its pack was scanned is asked again at the next
start, as ComfyUI asks again at each ``/object_info`` natively (ReActor's face swap nodes
download a model list there; many packs list a folder the user makes later). A node whose
shape is wrong stays skipped, and a pack with nothing to ask again starts no worker: its scan
comes from the cache. Real worker processes, the loader's real cache (``_read_nodes``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from comfy_airlock import settings
from comfy_airlock.host import loader
from comfy_airlock.host.pack import IsolatedPack

PACK = """
import os

FOLDER = {folder!r}


class Listed:
    RETURN_TYPES = ("STRING",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {{"required": {{"name": (sorted(os.listdir(FOLDER)),)}}}}

    def run(self, name):
        return (name,)


class NoReturnTypes:  # ComfyUI cannot describe it either, now or later
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {{"required": {{}}}}


NODE_CLASS_MAPPINGS = {{"Listed": Listed, "NoReturnTypes": NoReturnTypes}}
"""


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRLOCK_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(settings, "_SETTINGS", [])  # read again from this environment
    yield
    settings._SETTINGS.clear()


def pack(d: Path) -> IsolatedPack:
    """The pack as one ComfyUI start sets it up."""
    return IsolatedPack(
        name="listing",
        dir=str(d),
        python=sys.executable,
        env_dir=sys.prefix,
        env_key="test",
        comfy=False,
    )


def read_nodes(d: Path) -> tuple[dict, bool]:
    """What one start reads, and whether it had to start the pack's worker for it."""
    p = pack(d)
    try:
        meta = loader._read_nodes(p, None)
        return meta, p.alive()
    finally:
        p.close()


def test_a_node_whose_input_types_raised_is_asked_again_at_the_next_start(tmp_path, home):
    folder = tmp_path / "models" / "listing"
    d = tmp_path / "listing"
    d.mkdir()
    (d / "__init__.py").write_text(PACK.format(folder=str(folder)))

    meta, scanned = read_nodes(d)  # the folder is not there yet: os.listdir raises
    assert scanned and "Listed" not in meta["nodes"]
    assert "FileNotFoundError" in meta["skipped"]["Listed"]
    assert "RETURN_TYPES" in meta["skipped"]["NoReturnTypes"]
    assert meta["retry"] == ["Listed"]

    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"")
    meta, scanned = read_nodes(d)  # the next start: the same pack, asked again
    assert scanned and meta["retry"] == []
    assert meta["nodes"]["Listed"]["INPUT_TYPES"]["required"]["name"][0] == ["model.safetensors"]
    assert "NoReturnTypes" in meta["skipped"]  # its shape: skipped however often asked

    meta, scanned = read_nodes(d)  # nothing left to ask: the cached scan, no worker
    assert not scanned and "Listed" in meta["nodes"]


def test_a_rescan_whose_worker_cannot_start_lists_the_nodes_read_before(tmp_path, home, caplog):
    """The nodes to ask again are asked again; when the worker itself cannot start (not the
    pack's doing: its interpreter gone for a moment, say), the start lists what an earlier
    one read, says why, and the next start asks again."""
    folder = tmp_path / "models" / "listing"
    d = tmp_path / "listing"
    d.mkdir()
    (d / "__init__.py").write_text(PACK.format(folder=str(folder)))
    first, _ = read_nodes(d)
    assert first["retry"] == ["Listed"]

    broken = pack(d)
    broken.python = str(tmp_path / "no-such-python")
    with caplog.at_level("WARNING", logger=loader.log.name):
        meta = loader._read_nodes(broken, None)
    broken.close()
    assert meta == first
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "pack 'listing': its worker could not read its nodes" in said, said
    assert "the nodes an earlier start read are listed" in said, said

    folder.mkdir(parents=True)
    meta, scanned = read_nodes(d)  # the worker starts again: asked again, found now
    assert scanned and "Listed" in meta["nodes"] and meta["retry"] == []

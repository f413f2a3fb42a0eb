"""``comfy-nodes = false`` (ADR 0060) with real workers and the real ComfyUI 0.30.0: the pack
tests/packs/nodes-off, and a copy of it without that line (ComfyUI's default), each loaded by
the host's loader in a worker of its own. Prints ``RESULT {...}``: for each, what ComfyUI had
imported when the pack's import began, what a node of it finds when it imports ComfyUI's model
management and ``nodes`` itself, how long the worker took from its start to its first answer
and how long that node took (informative: no timed assertion).

Run as ``python comfy_nodes_scenario.py`` (a fresh process: the host side is scenario_host's).
"""

from __future__ import annotations

import json
import shutil
import time

from scenario_host import REPO, TMP, close_all, loader

PACK = REPO / "tests" / "packs" / "nodes-off"


def start(name: str, comfy_nodes: bool) -> dict:
    """The pack under ``name``, its folder named as the original (its module's name)."""
    pack_dir = TMP / name / PACK.name
    shutil.copytree(PACK, pack_dir, ignore=shutil.ignore_patterns("__pycache__"))
    if comfy_nodes:
        toml = pack_dir / "airlock.toml"
        toml.write_text(toml.read_text().replace("comfy-nodes = false\n", ""))
    t0 = time.monotonic()
    mappings, _ = loader.load_pack(str(pack_dir), name)
    assert "NodesOffAdd" in mappings, loader.status()
    pack = loader._PACKS[name]
    pack.scan()  # the worker imports the pack (the loader may have read a cached scan)
    at_import = pack.call("nodes-off:at_import")
    started = time.monotonic() - t0
    t1 = time.monotonic()
    uses = pack.call("nodes-off:uses_comfy")
    return {
        "at_import": at_import,
        "uses_comfy": uses,
        "seconds_to_first_answer": round(started, 2),
        "seconds_of_the_node_importing_comfy": round(time.monotonic() - t1, 2),
    }


def main() -> None:
    try:
        result = {"off": start("off", False), "default": start("default", True)}
    finally:
        close_all()
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()

"""What a worker's start costs until its pack is scanned: from spawn to the return of the first
``scan`` of a pack that imports ComfyUI (``tests/packs/e2e-nodes``: comfy.model_management,
comfy.utils, folder_paths, torch, PIL, server), alternating with a bare ``import torch`` in a
fresh interpreter as the reference the machine's load moves with.

Since issue 14 the worker loads ComfyUI's ``nodes`` and builtin extra nodes before the pack
(worker/startup.py). To compare with the code before that, run the same script against the
older package (its native module included) on ``PYTHONPATH``:

    .venv/bin/python bench/comfy_state_cost.py --rounds 5
    git archive <before> python | tar -x -C /tmp/before && cp python/comfy_airlock/*.so \\
        /tmp/before/python/comfy_airlock/ && PYTHONPATH=/tmp/before/python \\
        .venv/bin/python bench/comfy_state_cost.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def scan_once(python: str, comfyui: str, pack: Path) -> float:
    from comfy_airlock.supervisor import Worker

    config = {
        "comfyui_dir": comfyui,
        "pack_dir": str(pack),
        "pack_name": pack.name,
        "args": {"cpu": True},
        "argv": [os.path.join(comfyui, "main.py"), "--cpu"],
    }
    env = dict(os.environ, AIRLOCK_COMFY=json.dumps(config), AIRLOCK_WORKER="1")
    start = time.perf_counter()
    worker = Worker(python, preload=["comfy_airlock.worker.comfy"], env=env, name=pack.name)
    try:
        nodes = worker.call("comfy_airlock.worker.comfy:scan")["nodes"]
        assert nodes, "the pack has no nodes"
        return time.perf_counter() - start
    finally:
        worker.close()


def bare_torch(python: str) -> float:
    start = time.perf_counter()
    subprocess.run([python, "-c", "import torch"], check=True)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--python", default=str(REPO / ".venv" / "bin" / "python"))
    p.add_argument("--comfyui", default=str(REPO / ".cache" / "comfyui" / "0.30.0" / "ComfyUI"))
    p.add_argument("--pack", default=str(REPO / "tests" / "packs" / "e2e-nodes"))
    a = p.parse_args()
    import comfy_airlock

    print(f"comfy_airlock from {Path(comfy_airlock.__file__).parent}", file=sys.stderr)
    scans, torches = [], []
    for i in range(a.rounds):
        torches.append(bare_torch(a.python))
        scans.append(scan_once(a.python, a.comfyui, Path(a.pack)))
        print(f"round {i}: scan {scans[-1]:.2f} s, bare import torch {torches[-1]:.2f} s")
    print(
        json.dumps(
            {
                "spawn_to_first_scan_s": {
                    "median": round(statistics.median(scans), 2),
                    "min": round(min(scans), 2),
                    "max": round(max(scans), 2),
                },
                "bare_import_torch_s": {"median": round(statistics.median(torches), 2)},
                "ratio_median": round(statistics.median(scans) / statistics.median(torches), 2),
                "load_average": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()

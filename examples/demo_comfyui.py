"""`make demo`: the real ComfyUI 0.30.0 on CPU with comfy-airlock and two isolated example packs.

1. Makes a ComfyUI base directory (``.cache/demo-base``) with ``custom_nodes/comfy-airlock``
   (this repo's ``custom_node/``) and ``isolated_nodes/`` holding ``examples/packs/legacy-numpy``
   (Python 3.10 + numpy 1, which cannot be imported into ComfyUI's numpy 2) and
   ``examples/packs/tiny-model`` (V3 nodes with a torch model kept across calls).
2. Starts ComfyUI (``main.py --cpu``); comfy-airlock builds the packs' environments with uv on
   the first start (``airlock build`` does the same ahead of time).
3. Queues a workflow through the HTTP API (``POST /prompt``), waits on ``/history``, and prints
   where the image landed, what the isolated nodes reported, and the worker table.
4. Stops the server.

``python examples/demo_comfyui.py --keep`` leaves it serving (``make run`` does that).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from comfyui.harness import DEFAULT_COMFYUI_DIR, ComfyUI, make_base_dir  # noqa: E402

from comfy_airlock.status import render  # noqa: E402

WORKFLOW = {
    "noise": {
        "class_type": "LegacyNoiseImage",
        "inputs": {"width": 256, "height": 192, "seed": 42},
    },
    "poster": {"class_type": "LegacyPosterize", "inputs": {"image": ["noise", 0], "levels": 4}},
    "enhance": {
        "class_type": "TinyModelEnhance",
        "inputs": {"image": ["poster", 0], "strength": 1.5, "steps": 8},
    },
    "save": {
        "class_type": "SaveImage",
        "inputs": {"images": ["enhance", 0], "filename_prefix": "airlock-demo"},
    },
    "versions": {"class_type": "LegacyVersions", "inputs": {}},
    "show_versions": {"class_type": "PreviewAny", "inputs": {"source": ["versions", 0]}},
    "info": {"class_type": "TinyModelInfo", "inputs": {"image": ["enhance", 0]}},
    "show_info": {"class_type": "PreviewAny", "inputs": {"source": ["info", 0]}},
}


def table(rows: list[dict], cols: list[str]) -> str:
    cells = [[str(r.get(c, "") if r.get(c) is not None else "-") for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    line = "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))
    body = ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join([line, "  ".join("-" * w for w in widths), *body])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", action="store_true", help="leave the server running")
    ap.add_argument("--port", type=int, default=None)
    opts = ap.parse_args()

    comfyui_dir = Path(os.environ.get("COMFYUI_DIR") or DEFAULT_COMFYUI_DIR)
    if not (comfyui_dir / "main.py").is_file():
        print(f"ComfyUI is missing at {comfyui_dir}: run `make setup`", file=sys.stderr)
        return 2
    root = REPO / ".cache"
    shutil.rmtree(root / "demo-base", ignore_errors=True)
    base = make_base_dir(
        root,
        custom_nodes={"comfy-airlock": REPO / "custom_node"},
        isolated={
            "legacy-numpy": REPO / "examples/packs/legacy-numpy",
            "tiny-model": REPO / "examples/packs/tiny-model",
        },
        name="demo-base",
    )
    print(f"ComfyUI {comfyui_dir}\nbase    {base}")
    print("starting ComfyUI on CPU (the first start builds the packs' environments)...")
    ui = ComfyUI(comfyui_dir, base, port=opts.port, startup_timeout=1800, start=False)
    try:
        ui.start()
        print(f"serving at {ui.url} (started in {ui.startup_seconds:.1f} s)")
        t0 = time.perf_counter()
        entry = ui.run(WORKFLOW, timeout=600)
        took = time.perf_counter() - t0
        [image] = ui.output_paths(entry)
        print(f"\nworkflow done in {took:.2f} s; image: {image} ({image.stat().st_size} bytes)")
        for node in ("show_versions", "show_info"):
            print(
                f"  {WORKFLOW[node.replace('show_', '')]['class_type']}: "
                f"{entry['outputs'][node]['text'][0]}"
            )
        t0 = time.perf_counter()
        ui.run(WORKFLOW, timeout=600)
        print(
            f"same workflow again: {time.perf_counter() - t0:.2f} s (served from ComfyUI's cache)"
        )
        rows = ui.get("/airlock/workers")
        print("\nworkers (GET /airlock/workers):")
        cols = [
            "pack",
            "state",
            "pid",
            "generation",
            "python",
            "torch",
            "numpy",
            "rss_mib",
            "calls",
            "errors",
            "busy_s",
        ]
        print(table(rows, cols))
        print("\nmemory (GET /airlock/status, as `airlock status` shows it):")
        print(render(ui.get("/airlock/status")))
        if opts.keep:
            print(f"\nComfyUI keeps serving at {ui.url} — Ctrl-C stops it.")
            while ui.alive:
                time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        status = ui.stop()
        print(f"\nComfyUI stopped (exit status {status}); its log: {ui.log_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

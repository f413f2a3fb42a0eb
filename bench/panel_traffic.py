"""What the Airlock panel sends over ComfyUI's websocket (ADR 0026), against the real ComfyUI
on the CPU with ``examples/packs/legacy-numpy`` isolated: the panel's events per kind while
idle, and during a burst of prompts (every call changes the status: calls, busy time), and
the latency and size of its one read, ``GET /airlock/panel``. Counted by the harness's own
websocket client, which ComfyUI treats as any browser.

    .venv/bin/python bench/panel_traffic.py [--seconds 30]

Prints one line per measurement, and the raw figures as JSON on the last line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from comfyui.harness import DEFAULT_COMFYUI_DIR, ComfyUI, make_base_dir  # noqa: E402


def prompt(seed: int) -> dict:
    return {
        "1": {
            "class_type": "LegacyNoiseImage",
            "inputs": {"width": 16, "height": 16, "seed": seed},
        },
        "2": {"class_type": "PreviewImage", "inputs": {"images": ["1", 0]}},
    }


def events(ui: ComfyUI, t0: float, t1: float) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in ui.messages():
        if t0 <= m["received_at"] < t1 and str(m["type"]).startswith("comfy-airlock."):
            out[m["type"]] = out.get(m["type"], 0) + 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    opts = ap.parse_args()
    base = make_base_dir(
        Path(tempfile.mkdtemp(prefix="panel-traffic-")),
        custom_nodes={"comfy-airlock": REPO / "custom_node"},
        isolated={"legacy-numpy": REPO / "examples" / "packs" / "legacy-numpy"},
    )
    home = REPO / ".cache" / "test-airlock-home"
    result: dict = {}
    with ComfyUI(DEFAULT_COMFYUI_DIR, base, env={"AIRLOCK_HOME": str(home)}) as ui:
        ui.run(prompt(0), timeout=300)
        time.sleep(3)
        t0 = time.monotonic()
        time.sleep(opts.seconds)
        t1 = time.monotonic()
        result["idle"] = {"seconds": round(t1 - t0, 1), "events": events(ui, t0, t1)}
        print(f"idle {t1 - t0:.1f} s: {result['idle']['events']}")
        n, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < opts.seconds:
            n += 1
            ui.run(prompt(n), timeout=300)
        t1 = time.monotonic()
        result["burst"] = {"seconds": round(t1 - t0, 1), "prompts": n, "events": events(ui, t0, t1)}
        print(f"burst {t1 - t0:.1f} s, {n} prompts: {result['burst']['events']}")
        latency = []
        for _ in range(20):
            a = time.perf_counter()
            snap = ui.get("/airlock/panel")
            latency.append(time.perf_counter() - a)
        result["read"] = {
            "median_ms": round(statistics.median(latency) * 1000, 1),
            "max_ms": round(max(latency) * 1000, 1),
            "bytes": len(json.dumps(snap)),
            "samples": len(snap["history"]),
        }
        print(f"GET /airlock/panel: {result['read']}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

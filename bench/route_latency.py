"""What forwarding costs a pack's HTTP route: one real ComfyUI with tests/packs/routes-pack
loaded natively (custom_nodes/routes-native) and isolated (isolated_nodes/routes-iso); the
same requests to both, timed from this client. Run:
`.venv/bin/python bench/route_latency.py [N]` (needs the ComfyUI tree of scripts/comfyui.sh).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from comfyui.harness import DEFAULT_COMFYUI_DIR, ComfyUI, make_base_dir  # noqa: E402

CASES = [
    ("GET", "/module-routes", None),
    ("POST", "/json", json.dumps({"k": list(range(100))}).encode()),
    ("GET", "/file", None),
    ("GET", "/big?n=3000000", None),
]


def _time(url: str, method: str, body: bytes | None, n: int) -> list[float]:
    out = []
    for _ in range(n):
        req = urllib.request.Request(url, data=body, method=method)
        req.add_header("Content-Type", "application/json")
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=120) as r:
            r.read()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main(n: int) -> None:
    home = os.environ.get("AIRLOCK_HOME") or str(REPO / ".cache" / "test-airlock-home")
    with tempfile.TemporaryDirectory() as tmp:
        base = make_base_dir(
            Path(tmp),
            custom_nodes={
                "comfy-airlock": REPO / "custom_node",
                "routes-native": REPO / "tests/packs/routes-pack",
            },
            isolated={"routes-iso": REPO / "tests/packs/routes-pack"},
            copy=True,
        )
        comfyui = Path(os.environ.get("COMFYUI_DIR") or DEFAULT_COMFYUI_DIR)
        with ComfyUI(comfyui, base, env={"AIRLOCK_HOME": home}, startup_timeout=1200) as ui:
            _time(ui.url + "/routes-iso/where", "GET", None, 3)  # the worker is up
            print(f"{'request':24} {'native ms':>18} {'isolated ms':>18}  (median, p90; n={n})")
            for method, path, body in CASES:
                row = []
                for prefix in ("/routes-native", "/routes-iso"):
                    s = sorted(_time(ui.url + prefix + path, method, body, n))
                    row.append(f"{statistics.median(s):8.2f} {s[int(len(s) * 0.9) - 1]:8.2f}")
                print(f"{method + ' ' + path:24} {row[0]:>18} {row[1]:>18}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50)

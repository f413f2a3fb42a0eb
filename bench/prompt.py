"""A prompt end to end over HTTP: a workflow of an image-filter pack's nodes run isolated by one
real ComfyUI and natively by another, in the same run (prompts alternate between the two).

    .venv/bin/python bench/prompt.py [--rounds 4] [--prompts 5] [--size 1024]
        [--out bench/out/prompt.json]

The workflow: LoadImage (ComfyUI's, a size x size PNG) -> ColorAdjust -> GaussianBlur ->
Sharpen -> ImageScaleBy (tests/packs/image-filters, a pack in the common shape: PIL per image
and torch on the batch) -> SaveImage (ComfyUI's). Each prompt changes ColorAdjust's brightness,
so every pack node runs again while ComfyUI's cache serves the loaded image, as when one
parameter is tuned between runs. Isolated, the image enters the worker once (the pack's nodes
hand their outputs on by reference) and comes back once.

A prompt's time is the client's: POST /prompt until the websocket's ``execution_success`` for
it. The first prompt on each server is untimed (the isolated one starts its worker there).
Target: isolated <= 1.1x native.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT / "tests"))

from comfyui.harness import DEFAULT_COMFYUI_DIR, ComfyUI  # noqa: E402
from comfyui.native_oracle import start_pair  # noqa: E402

PACK = "image-filters"
PREFIX = "AirlockFilter"
AIRLOCK_HOME = Path(os.environ.get("AIRLOCK_TEST_HOME") or ROOT / ".cache" / "test-airlock-home")


def workflow(brightness: float) -> dict:
    return {
        "1": {"class_type": "LoadImage", "inputs": {"image": "bench.png"}},
        "2": {
            "class_type": f"{PREFIX}: ColorAdjust",
            "inputs": {
                "image": ["1", 0],
                "brightness": brightness,
                "contrast": 1.1,
                "saturation": 0.9,
            },
        },
        "3": {
            "class_type": f"{PREFIX}: GaussianBlur",
            "inputs": {"image": ["2", 0], "radius": 2.0},
        },
        "4": {"class_type": f"{PREFIX}: Sharpen", "inputs": {"image": ["3", 0], "alpha": 0.8}},
        "5": {
            "class_type": f"{PREFIX}: ImageScaleBy",
            "inputs": {"image": ["4", 0], "scale_by": 0.5},
        },
        "6": {
            "class_type": "SaveImage",
            "inputs": {"images": ["5", 0], "filename_prefix": "bench"},
        },
    }


def write_input(base: Path, size: int) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(base / "input" / "bench.png")


def run_one(ui: ComfyUI, brightness: float, timeout: float = 600) -> dict:
    t0 = time.perf_counter()
    prompt_id = ui.queue(workflow(brightness))
    ui.wait_message(
        lambda m: (m.get("data") or {}).get("prompt_id") == prompt_id,
        type="execution_success",
        timeout=timeout,
    )
    client = time.perf_counter() - t0
    entry = ui.wait(prompt_id, timeout)
    if (entry.get("status") or {}).get("status_str") != "success":
        raise RuntimeError(f"prompt failed: {json.dumps(entry)[:2000]}")
    return {"client_s": client}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=5, help="per server per round")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--comfy", default=str(DEFAULT_COMFYUI_DIR))
    ap.add_argument("--out", type=Path, default=BENCH / "out" / "prompt.json")
    args = ap.parse_args()
    env = {"AIRLOCK_HOME": str(AIRLOCK_HOME)}
    servers: list[ComfyUI] = []

    def start(base: Path, timeout: float) -> ComfyUI:
        ui = ComfyUI(args.comfy, base, env=env, startup_timeout=timeout, start=False)
        servers.append(ui)
        return ui.start()

    def prepare(base: Path) -> None:
        write_input(base, args.size)

    started = time.perf_counter()
    load = [os.getloadavg()[0]]
    samples: dict[str, list[list[dict]]] = {"native": [], "isolated": []}
    with tempfile.TemporaryDirectory(prefix="airlock-prompt-bench-") as tmp:
        try:
            pair = start_pair(
                start, Path(tmp), {PACK: ROOT / "tests" / "packs" / PACK}, prepare=prepare
            )
            uis = {"native": pair.native, "isolated": pair.isolated}
            for ui in uis.values():
                run_one(ui, 0.5)  # untimed: the isolated server starts its worker here
            step = 0
            for r in range(args.rounds):
                order = list(uis) if r % 2 == 0 else list(reversed(uis))
                batch: dict[str, list[dict]] = {k: [] for k in uis}
                for _ in range(args.prompts):
                    step += 1
                    for who in order:
                        batch[who].append(run_one(uis[who], 0.8 + 0.001 * step))
                for who in uis:
                    samples[who].append(batch[who])
                load.append(os.getloadavg()[0])
                med = {k: statistics.median(s["client_s"] for s in v) for k, v in batch.items()}
                print(
                    f"round {r + 1}: native {med['native']:.3f} s, isolated "
                    f"{med['isolated']:.3f} s ({med['isolated'] / med['native']:.2f}x), "
                    f"load {load[-1]:.2f}",
                    file=sys.stderr,
                )
        finally:
            for ui in servers:
                ui.stop()

    def per_round(who: str, key: str) -> list[float]:
        return [statistics.median(s[key] for s in batch) for batch in samples[who]]

    result: dict = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "elapsed_s": time.perf_counter() - started,
        "size": args.size,
        "rounds": args.rounds,
        "prompts_per_round": args.prompts,
        "loadavg_1min": load,
        "samples": samples,
        "workflow": workflow(0.8),
    }
    for key in ("client_s",):
        nat, iso = per_round("native", key), per_round("isolated", key)
        ratios = [i / n for i, n in zip(iso, nat, strict=True)]
        result[key] = {
            "native": statistics.median(nat),
            "isolated": statistics.median(iso),
            "native_rounds": nat,
            "isolated_rounds": iso,
            "ratio": statistics.median(ratios),
            "ratio_rounds": ratios,
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    c = result["client_s"]
    print(
        f"prompt of {PACK} nodes on a {args.size}x{args.size} image, end to end over HTTP: "
        f"native {c['native']:.3f} s, isolated {c['isolated']:.3f} s, ratio {c['ratio']:.2f}x "
        f"(per round {', '.join(f'{x:.2f}' for x in c['ratio_rounds'])}; target <= 1.1x); "
        f"load {', '.join(f'{x:.1f}' for x in load)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

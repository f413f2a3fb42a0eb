"""First isolated node after a restart of ComfyUI: how long a prompt takes when the pack's
worker is cold, with workers started when they are needed (``off``: the node starts it), when
the prompt is queued (``queue``, the default), and with ComfyUI (``prestart``).

The real ComfyUI 0.30.0 (tests/comfyui/harness.py), with ``tests/packs/prompt-pack`` isolated
(a pack that imports ComfyUI: its worker loads torch and ComfyUI's nodes) and a native copy of
it in ``custom_nodes/`` for its ``Wait`` node. Each round restarts ComfyUI (the scan is cached,
so no worker runs), queues as soon as ComfyUI answers HTTP the prompt "native Wait(W s), then
the isolated Show", and times it from ``POST /prompt`` to its end; then the same prompt again
(new text, so nothing is cached) with the worker warm: the floor, in the same run. What the
cold worker costs is the first minus the floor.

    .venv/bin/python bench/first_node.py --rounds 2 --wait 0 5 > bench/results/first_node.txt
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from comfyui.harness import DEFAULT_COMFYUI_DIR, ComfyUI, make_base_dir  # noqa: E402

PACK = REPO / "tests" / "packs" / "prompt-pack"
ISO, NATIVE = "bench-iso", "bench-native"
MODES = ("off", "queue", "prestart")


def base_for(root: Path, mode: str) -> Path:
    base = make_base_dir(
        root,
        custom_nodes={"comfy-airlock": REPO / "custom_node", NATIVE: PACK},
        isolated={ISO: PACK},
        copy=True,
        name=f"base-{mode}",
    )
    (base / "custom_nodes" / NATIVE / "airlock.toml").unlink(missing_ok=True)
    if mode == "prestart":
        with open(base / "isolated_nodes" / ISO / "airlock.toml", "a") as f:
            f.write("prestart = true\n")
    return base


def prompt(wait: float) -> dict:
    text = uuid.uuid4().hex
    return {
        "1": {"class_type": f"{NATIVE}.Wait", "inputs": {"seconds": wait, "text": text}},
        "2": {"class_type": f"{ISO}.Show", "inputs": {"text": ["1", 0]}},
    }


def timed(ui: ComfyUI, wait: float) -> float:
    t0 = time.monotonic()
    entry = ui.wait(ui.queue(prompt(wait)), timeout=900, poll=0.05)
    assert entry["status"]["status_str"] == "success", entry["status"]
    return time.monotonic() - t0


def worker_row(ui: ComfyUI) -> dict:
    return {r["pack"]: r for r in ui.get("/airlock/workers")}[ISO]


def one_round(comfyui: Path, base: Path, mode: str, wait: float, home: str) -> dict:
    env = {"AIRLOCK_HOME": home, "AIRLOCK_START_ON_QUEUE": "0" if mode == "off" else "1"}
    ui = ComfyUI(comfyui, base, env=env, startup_timeout=1200, websocket=False, start=False)
    ui.start()
    try:
        state_at_ready = worker_row(ui)["state"]
        first = timed(ui, wait)
        floor = timed(ui, wait)
        # How long the start ahead took, from its claim to the pack's import done (its log).
        ahead = re.search(r"worker started ahead of its nodes in ([\d.]+) s", ui.log_text())
        return {
            "mode": mode,
            "wait": wait,
            "first_s": round(first, 2),
            "floor_s": round(floor, 2),
            "cold_cost_s": round(first - floor, 2),
            "worker_at_ready": state_at_ready,
            "start_ahead_s": float(ahead.group(1)) if ahead else None,
            "comfyui_start_s": round(ui.startup_seconds or 0, 1),
            "load": os.getloadavg()[0],
        }
    finally:
        ui.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--wait", type=float, nargs="+", default=[0.0, 5.0])
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    p.add_argument("--comfyui", default=os.environ.get("COMFYUI_DIR") or str(DEFAULT_COMFYUI_DIR))
    p.add_argument("--root", default=f"/tmp/airlock-first-node-{os.getpid()}")
    args = p.parse_args()
    home = os.environ.get("AIRLOCK_HOME") or str(REPO / ".cache" / "test-airlock-home")
    root, comfyui = Path(args.root), Path(args.comfyui)
    bases = {mode: base_for(root, mode) for mode in args.modes}
    for base in bases.values():  # the scans, cached for the measured starts
        ui = ComfyUI(
            comfyui, base, env={"AIRLOCK_HOME": home}, startup_timeout=1200, websocket=False
        )
        ui.stop()
    rows = []
    for r in range(args.rounds):
        for wait in args.wait:
            for mode in args.modes:  # interleaved, so the machine's load moves all alike
                row = one_round(comfyui, bases[mode], mode, wait, home)
                row["round"] = r
                rows.append(row)
                print(json.dumps(row), flush=True)
    print("\nmode      W(s)  first(s) median  floor(s) median  cold cost(s) median")
    for wait in args.wait:
        for mode in args.modes:
            sel = [x for x in rows if x["mode"] == mode and x["wait"] == wait]
            med = {
                k: statistics.median(x[k] for x in sel)
                for k in ("first_s", "floor_s", "cold_cost_s")
            }
            print(
                f"{mode:9} {wait:4.1f}  {med['first_s']:15.2f}  {med['floor_s']:15.2f}  "
                f"{med['cold_cost_s']:19.2f}"
            )


if __name__ == "__main__":
    main()

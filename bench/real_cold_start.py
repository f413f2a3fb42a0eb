"""A real public pack through a new worker's cold start, on both bounded paths of ADR 0047:
a route request with a route bound shorter than the worker's start, and a node of a pack whose
``call-deadline`` is shorter than its import in a new worker.

    .venv/bin/python bench/real_cold_start.py PACK_DIR --route /rgthree/api/config \
        --prompt '{"1": {...}}' [--deadline 1] [--route-timeout 2] [--out FILE.json]

PACK_DIR is a checkout of the pack (outside the repository; never committed): it is copied
into ``isolated_nodes/`` of a fresh base directory with an ``airlock.toml`` of
``dependencies = ["torch"]`` and the deadline, and run by the real ComfyUI of the tests. For
each path: once warm, then after the worker was killed (SIGKILL), each timed; the JSON has the
statuses, the answers' heads and the times. Used for rgthree/rgthree-comfy in
docs/benchmarks.md; not part of ``make test`` (it needs a pack checkout).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.comfyui.harness import (  # noqa: E402
    DEFAULT_COMFYUI_DIR,
    ComfyUI,
    execution_error,
    make_base_dir,
)

AIRLOCK_HOME = REPO / ".cache" / "test-airlock-home"


def fetch(ui: ComfyUI, path: str) -> tuple[int, bytes, float]:
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(ui.url + path, timeout=600) as r:
            status, body = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    return status, body, time.monotonic() - t0


def kill_worker(ui: ComfyUI, pack: str) -> int:
    row = {r["pack"]: r for r in ui.get("/airlock/workers")}[pack]
    os.kill(row["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while {r["pack"]: r for r in ui.get("/airlock/workers")}[pack]["state"] == "running":
        if time.monotonic() > deadline:
            raise RuntimeError(f"{pack}'s worker {row['pid']} still runs after SIGKILL")
        time.sleep(0.1)
    return row["generation"]


def run_prompt(ui: ComfyUI, prompt: dict) -> dict:
    t0 = time.monotonic()
    entry = ui.run(prompt, timeout=600, check=False)
    error = execution_error(entry)
    return {
        "ok": error is None,
        "error": None
        if error is None
        else f"{error.get('exception_type')}: {error.get('exception_message')}"[:400],
        "outputs": entry.get("outputs"),
        "seconds": round(time.monotonic() - t0, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("pack_dir", type=Path)
    ap.add_argument("--route", required=True)
    ap.add_argument("--prompt", required=True, help="a prompt of the pack's nodes (JSON)")
    ap.add_argument("--deadline", type=float, default=1.0)
    ap.add_argument("--route-timeout", type=float, default=2.0)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--home", type=Path, default=AIRLOCK_HOME, help="AIRLOCK_HOME (its envs)")
    args = ap.parse_args()
    pack = args.pack_dir.name
    prompt = json.loads(args.prompt)
    with tempfile.TemporaryDirectory(prefix="airlock-real-") as tmp:
        base = make_base_dir(
            Path(tmp),
            custom_nodes={"comfy-airlock": REPO / "custom_node"},
            isolated={pack: args.pack_dir},
            copy=True,
        )
        (base / "isolated_nodes" / pack / "airlock.toml").write_text(
            f'dependencies = ["torch"]\ncall-deadline = {args.deadline}\n'
        )
        env = {
            "AIRLOCK_HOME": str(args.home),
            "AIRLOCK_ROUTE_TIMEOUT": str(args.route_timeout),
        }
        ui = ComfyUI(DEFAULT_COMFYUI_DIR, base, env=env, startup_timeout=1200)
        result: dict = {
            "pack": pack,
            "deadline_s": args.deadline,
            "route_timeout_s": args.route_timeout,
        }
        try:
            for when in ("warm", "after_kill"):
                if when == "after_kill":
                    result["killed_generation"] = kill_worker(ui, pack)
                status, body, took = fetch(ui, args.route)
                result[f"route_{when}"] = {
                    "status": status,
                    "head": body[:160].decode("utf-8", "replace"),
                    "seconds": round(took, 3),
                }
            for when in ("warm", "after_kill"):
                if when == "after_kill":
                    kill_worker(ui, pack)
                result[f"node_{when}"] = run_prompt(ui, prompt)
            result["workers"] = [
                {k: r.get(k) for k in ("pack", "state", "generation", "pid")}
                for r in ui.get("/airlock/workers")
            ]
        finally:
            ui.stop()
            result["log_tail"] = ui.log_tail(40)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()

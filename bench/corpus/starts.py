"""Robustness of ComfyUI starts with real packs isolated (issue 14's acceptance): N starts in a
row of the real ComfyUI with a set of corpus packs in ``isolated_nodes/`` (their environments
and scans already made by ``run.py``), each one: started (a hang is a start that does not serve
``/system_stats`` within ``--hang-after`` seconds), one node of each pack run (so every worker
is up), then Ctrl-C as a terminal sends it (SIGINT to the process group) and the time until
ComfyUI has exited; then whether any worker process is left.

    .venv/bin/python -m bench.corpus.starts /work/corpus/packs --packs A B C [--starts 20]

Raw results: ``bench/corpus/results/starts.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.corpus.run import (  # noqa: E402
    COMMON_ENV,
    PROBE,
    PROBE_NAME,
    RESULTS,
    _write_config,
)
from tests.comfyui.harness import (  # noqa: E402
    DEFAULT_COMFYUI_DIR,
    ComfyUI,
    ComfyUIError,
    make_base_dir,
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is gone for our purpose (its parent has not reaped it yet).
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


def _sigint_exit(ui: ComfyUI, limit: float) -> float | None:
    """Seconds from SIGINT to the process group until ComfyUI exited (None: not within
    ``limit``; it is then killed)."""
    proc = ui.proc
    assert proc is not None
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    while time.monotonic() - t0 < limit:
        if proc.poll() is not None:
            return round(time.monotonic() - t0, 3)
        time.sleep(0.01)
    return None


def _workers(ui: ComfyUI, want: int, wait: float) -> list[int]:
    """The worker pids ComfyUI reports, once ``want`` are up (or ``wait`` seconds passed)."""
    t0 = time.monotonic()
    while True:
        status, body, _ = ui.request("GET", "/airlock/workers", timeout=30)
        rows = json.loads(body) if status == 200 else []
        pids = [r["pid"] for r in rows if r.get("pid")]
        if len(pids) >= want or time.monotonic() - t0 > wait:
            return pids
        time.sleep(0.5)


def one_start(
    comfyui: Path, base: Path, env: dict, nodes: dict[str, str], hang: float, want: int
) -> dict:
    ui = ComfyUI(comfyui, base, env=env, startup_timeout=hang, websocket=False, start=False)
    out: dict[str, Any] = {}
    t0 = time.monotonic()
    try:
        ui.start()
    except ComfyUIError as e:
        out["hang_or_failed"] = str(e)[-500:]
        ui.stop(grace=5)
        return out
    out["start_s"] = round(time.monotonic() - t0, 2)
    ran = {}
    for pack, node in nodes.items():
        prompt = {"1": {"class_type": node, "inputs": {}}}
        try:
            entry = ui.run(prompt, timeout=300, check=False)
            ran[pack] = (entry.get("status") or {}).get("status_str")
        except ComfyUIError as e:
            ran[pack] = f"error: {str(e)[:200]}"
    out["ran"] = ran
    workers = _workers(ui, want, 180)
    out["workers"] = len(workers)
    out["sigint_exit_s"] = _sigint_exit(ui, 60)
    ui.stop(grace=5)
    time.sleep(1)
    out["left"] = [pid for pid in workers if _alive(pid)]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packs", type=Path)
    parser.add_argument("--packs", dest="names", nargs="+", required=True)
    parser.add_argument("--node", nargs="*", default=[], help="PACK=NODE run once per start")
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--hang-after", type=float, default=600)
    parser.add_argument("--work", type=Path, default=Path("/work/corpus/runs/_starts"))
    parser.add_argument("--home", default="/work/corpus/airlock-home")
    parser.add_argument(
        "--native",
        action="store_true",
        help="the floor: the packs in custom_nodes/ (host venv; packs that need only ComfyUI's "
        "requirements), no comfy-airlock",
    )
    parser.add_argument(
        "--prestart",
        action="store_true",
        help="prestart = true in each airlock.toml: every worker starts with ComfyUI, and "
        "Ctrl-C comes once all are up",
    )
    args = parser.parse_args(argv)
    # Started in the background by a shell without job control, this process (and so each
    # ComfyUI it starts) would inherit SIGINT ignored, and Ctrl-C would be ignored: a handled
    # signal is reset to its default in the child.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    comfyui = Path(os.environ.get("COMFYUI_DIR") or DEFAULT_COMFYUI_DIR)
    env = {**COMMON_ENV, "AIRLOCK_HOME": args.home}
    if args.work.exists():
        shutil.rmtree(args.work)
    ours = {} if args.native else {"comfy-airlock": REPO / "custom_node"}
    base = make_base_dir(args.work, custom_nodes={**ours, PROBE_NAME: PROBE})
    for name in args.names:
        dst = base / ("custom_nodes" if args.native else "isolated_nodes") / name
        shutil.copytree(args.packs / name, dst, symlinks=True)
        if not args.native:
            _write_config(dst)
            if args.prestart:  # a top-level key: before the file's tables
                config = dst / "airlock.toml"
                config.write_text("prestart = true\n" + config.read_text())
    nodes = dict(n.split("=", 1) for n in args.node)
    runs = []
    for i in range(args.starts):
        want = 0 if args.native or not args.prestart else len(args.names)
        r = one_start(comfyui, base, env, nodes, args.hang_after, want)
        r["i"] = i
        runs.append(r)
        print(json.dumps(r), flush=True)
    exits = [r["sigint_exit_s"] for r in runs if r.get("sigint_exit_s") is not None]
    summary = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "side": "native" if args.native else "isolated",
        "command": " ".join(sys.argv),
        "packs": args.names,
        "nodes": nodes,
        "starts": len(runs),
        "hangs_or_failures": sum(1 for r in runs if "hang_or_failed" in r),
        "sigint_not_within_60s": sum(1 for r in runs if "start_s" in r and not r["sigint_exit_s"]),
        "workers_left": sum(len(r.get("left") or []) for r in runs),
        "sigint_exit_s": {
            "min": min(exits, default=None),
            "median": statistics.median(exits) if exits else None,
            "max": max(exits, default=None),
        },
        "start_s_median": statistics.median([r["start_s"] for r in runs if "start_s" in r] or [0]),
        "load_avg": os.getloadavg(),
        "runs": runs,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / ("starts-native.json" if args.native else "starts.json")
    out.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How long ComfyUI takes to exit, natively and with isolated packs, after SIGINT to its process
group (Ctrl-C) and after SIGTERM to its pid (a service manager), and where the time goes.

The real ComfyUI 0.30.0, started as tests/comfyui/harness.py starts it (its own session,
``--cpu``). ``native``: no custom node at all. ``isolated``: comfy-airlock with
``tests/packs/interrupt-nodes`` isolated, its worker started by one node and idle. Each run
measures, from the signal: when ComfyUI's "Stopped server" line appears (its main loop has
ended), when the process has exited (polled every 5 ms), the CPU time ComfyUI's own process
spent after the signal (/proc at exit minus at the signal; its workers' not included), and
comfy-airlock's own exit handler (its log line).
The configurations alternate, so the machine's load moves all alike.

    .venv/bin/python bench/shutdown.py --rounds 3 > bench/results/shutdown.txt
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from comfyui.harness import DEFAULT_COMFYUI_DIR, ComfyUI, free_port, make_base_dir  # noqa: E402

PACK = "bench-stop"
TICK = os.sysconf("SC_CLK_TCK")


def stat(pid: int) -> tuple[str, float]:
    """The process's state and its own CPU seconds (its children's not included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return fields[0], (int(fields[11]) + int(fields[12])) / TICK


def until_exited(pid: int) -> float:
    """Polls until ``pid`` is a zombie (exited, not reaped: /proc still has its final CPU
    times); returns its own CPU seconds then."""
    while True:
        state, cpu = stat(pid)
        if state == "Z":
            return cpu
        time.sleep(0.005)


def start(comfyui: Path, base: Path, env: dict) -> tuple[subprocess.Popen, ComfyUI, list]:
    ui = ComfyUI(comfyui, base, env=env, websocket=False, start=False, startup_timeout=1200)
    ui.port = free_port()  # started as the harness starts it, its output timed line by line
    lines: list[tuple[float, str]] = []
    proc = subprocess.Popen(
        ui.command(),
        cwd=base,
        env=ui.environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        text=True,
    )

    def read() -> None:
        for line in proc.stdout:
            lines.append((time.monotonic(), line.rstrip()))

    threading.Thread(target=read, daemon=True).start()
    ui.proc = proc
    deadline = time.monotonic() + 1200
    while True:
        try:
            ui.get("/system_stats", timeout=2)
            break
        except Exception:
            assert proc.poll() is None and time.monotonic() < deadline, "ComfyUI did not start"
            time.sleep(0.2)
    return proc, ui, lines


def one_run(comfyui: Path, base: Path, config: str, sig: signal.Signals, home: str) -> dict:
    env = {"AIRLOCK_HOME": home}
    proc, ui, lines = start(comfyui, base, env)
    if config == "isolated":
        ui.run({"1": {"class_type": "AirlockPid", "inputs": {"salt": time.time_ns() % 10**6}}}, 600)
    time.sleep(2.0)  # idle, as a user's ComfyUI is when stopped
    _, cpu0 = stat(proc.pid)
    t0 = time.monotonic()
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)
    else:
        os.kill(proc.pid, sig)
    cpu1 = until_exited(proc.pid)
    exited = time.monotonic() - t0
    proc.wait()
    time.sleep(0.2)  # the reader takes the last lines
    after = [(t - t0, line) for t, line in lines if t >= t0]
    stopped = next((t for t, line in after if "Stopped server" in line), None)
    handler = next(
        (
            float(m.group(1))
            for _, line in after
            if (m := re.search(r"stopped in ([\d.]+) s", line))
        ),
        None,
    )
    ui._reap()
    return {
        "config": config,
        "signal": sig.name,
        "exited_s": round(exited, 2),
        "loop_ended_s": None if stopped is None else round(stopped, 2),
        "exit_cpu_s": round(cpu1 - cpu0, 2),
        "airlock_handler_s": handler,
        "load": os.getloadavg()[0],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--comfyui", default=os.environ.get("COMFYUI_DIR") or str(DEFAULT_COMFYUI_DIR))
    p.add_argument("--root", default=f"/tmp/airlock-shutdown-{os.getpid()}")
    args = p.parse_args()
    home = os.environ.get("AIRLOCK_HOME") or str(REPO / ".cache" / "test-airlock-home")
    root, comfyui = Path(args.root), Path(args.comfyui)
    bases = {
        "native": make_base_dir(root, name="native"),
        "isolated": make_base_dir(
            root,
            custom_nodes={"comfy-airlock": REPO / "custom_node"},
            isolated={PACK: REPO / "tests" / "packs" / "interrupt-nodes"},
            name="isolated",
        ),
    }
    rows = []
    for r in range(args.rounds):
        for sig in (signal.SIGINT, signal.SIGTERM):
            for config, base in bases.items():
                row = one_run(comfyui, base, config, sig, home)
                row["round"] = r
                rows.append(row)
                print(json.dumps(row), flush=True)
    print("\nconfig    signal   exited(s) median [min-max]  exit CPU(s) median  handler(s)")
    for sig in ("SIGINT", "SIGTERM"):
        for config in bases:
            sel = [x for x in rows if x["config"] == config and x["signal"] == sig]
            ex = [x["exited_s"] for x in sel]
            cpu = statistics.median(x["exit_cpu_s"] for x in sel)
            hs = [x["airlock_handler_s"] for x in sel if x["airlock_handler_s"] is not None]
            print(
                f"{config:9} {sig:8} {statistics.median(ex):6.2f} [{min(ex):.2f}-{max(ex):.2f}]"
                f"  {cpu:17.2f}  {statistics.median(hs) if hs else '-'}"
            )


if __name__ == "__main__":
    main()

"""The prompt of bench/prompt.py, native and isolated: per prompt, the client's time and the
CPU time and minor page faults of each server process (ComfyUI, and the isolated one's
worker), read from /proc before and after N prompts. Run from the repository root:

    .venv/bin/python bench/results/issue20-heap/prompt_faults.py [N]
"""

import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))
import prompt as P  # noqa: E402
from comfyui.harness import DEFAULT_COMFYUI_DIR, ComfyUI  # noqa: E402
from comfyui.native_oracle import start_pair  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def tree(pid: int) -> list[int]:
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        kids = []
    return [pid, *(p for k in kids for p in tree(int(k)))]


def counters(pid: int) -> dict[int, tuple[float, int]]:
    out = {}
    for p in tree(pid):
        try:
            f = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[p] = ((int(f[11]) + int(f[12])) / TICK, int(f[7]))  # utime + stime, minflt
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    env = {"AIRLOCK_HOME": str(P.AIRLOCK_HOME)}
    servers: list[ComfyUI] = []

    def start(base: Path, timeout: float) -> ComfyUI:
        ui = ComfyUI(str(DEFAULT_COMFYUI_DIR), base, env=env, startup_timeout=timeout, start=False)
        servers.append(ui)
        return ui.start()

    print(f"load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            pair = start_pair(
                start,
                Path(tmp),
                {P.PACK: ROOT / "tests" / "packs" / P.PACK},
                prepare=lambda b: P.write_input(b, 1024),
            )
            uis = {"native": pair.native, "isolated": pair.isolated}
            for ui in uis.values():
                P.run_one(ui, 0.5)
                P.run_one(ui, 0.6)
            for _ in range(2):
                for who, ui in uis.items():
                    c0, wall = counters(ui.proc.pid), []
                    for i in range(n):
                        wall.append(P.run_one(ui, 0.8 + 0.001 * i)["client_s"])
                    c1 = counters(ui.proc.pid)
                    parts = []
                    for p, (cpu, flt) in c1.items():
                        cpu0, flt0 = c0.get(p, (0.0, 0))
                        name = "ComfyUI" if p == ui.proc.pid else "worker"
                        parts.append(
                            f"{name} cpu {(cpu - cpu0) / n * 1e3:.1f} ms, "
                            f"{(flt - flt0) / n:.0f} faults"
                        )
                    print(
                        f"{who}: client median {statistics.median(wall) * 1e3:.1f} ms; "
                        f"per prompt {'; '.join(parts)}",
                        flush=True,
                    )
        finally:
            for ui in servers:
                ui.stop()
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

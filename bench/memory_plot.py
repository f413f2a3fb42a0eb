"""The memory scenarios' figures and the headline plot (docs/memory.md), from a real run.

Runs tests/comfyui/wddm_scenarios.py (the real upstream ComfyUI 0.30.0 in the host, real
workers, the simulated 16 GiB card) for every scenario and semantics, three runs at a time, then
writes:

- ``bench/out/memory.json``: every run's result, the headline's traces included;
- ``bench/out/memory.md``: the table of figures that docs/memory.md shows;
- ``docs/memory-headline.png``: free memory over time in the seed's headline scenario on WDDM
  semantics, without and with the reserve (the truth, the host's blind view, the worker's view,
  and the reserve the host's ComfyUI reads), and on device-wide semantics for reference.

Run by ``make bench`` with the bench venv (matplotlib); the scenarios themselves run on the
host venv's Python (``--python``, ComfyUI's requirements), with ``COMFYUI_DIR`` as the Makefile
exports it::

    .envs/bench/bin/python bench/memory_plot.py --python .venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "tests" / "comfyui" / "wddm_scenarios.py"
GIB = 1 << 30

RUNS = [
    ("headline", "wddm", "off"),
    ("headline", "wddm", "on"),
    ("headline", "device_wide", "off"),
    ("headline", "device_wide", "on"),
    ("headline_small", "wddm", "on"),
    ("headline_small", "device_wide", "on"),
    ("admission", "wddm", "on"),
    ("admission", "device_wide", "on"),
    ("contention", "wddm", "on"),
    ("contention", "device_wide", "on"),
]


def run(python: str, scenario: str, semantics: str, reserve: str, tmp: Path) -> dict:
    out = tmp / f"{scenario}-{semantics}-{reserve}.json"
    env = {
        **os.environ,
        "AIRLOCK_RESERVE": reserve,
        "AIRLOCK_HOME": os.environ.get("AIRLOCK_TEST_HOME")
        or str(REPO / ".cache" / "test-airlock-home"),
    }
    env.setdefault("COMFYUI_DIR", str(REPO / ".cache" / "comfyui" / "0.30.0" / "ComfyUI"))
    p = subprocess.run(
        [python, str(SCENARIOS), scenario, semantics, "--trace", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    if p.returncode != 0 or not out.exists():
        sys.exit(f"{scenario} {semantics} reserve={reserve} failed:\n{p.stderr[-4000:]}")
    return json.loads(out.read_text())


def need(nbytes: int, reserve: int) -> int:
    """What upstream's ``load_models_gpu`` wants free to load ``nbytes`` (ComfyUI 0.30.0):
    ``1.1 x weights + max(0.8 GiB + reserve, reserve)`` with the unpublished reserve."""
    return int(nbytes * 1.1 + max(0.8 * GIB + reserve, reserve))


def gib(n: float) -> str:
    return f"{n / GIB:.2f}"


def table(results: dict) -> str:
    """One row per run: free memory before and after (true, and as the host reads it), bytes
    evicted against the minimum, demotions, overcommit and the reserve published."""
    rows = [
        "| scenario | semantics | reserve | true free before → after (GiB) | host's view before → "
        "after (GiB) | evicted / minimum (GiB) | demotions | peak overcommit (GiB) | "
        "EXTRA_RESERVED_VRAM (GiB) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (scenario, semantics, reserve), r in results.items():
        if scenario.startswith("headline"):
            b, a = r["before"], r["after"]
            rows.append(
                f"| {scenario} | {semantics} | {reserve} | {gib(b['true_free'])} → "
                f"{gib(a['true_free'])} | {gib(b['host_view'])} → {gib(a['host_view'])} | "
                f"{gib(r['evicted'])} / {gib(r['optimal_evicted'])} | "
                f"{a['demotions']['count']} ({gib(a['demotions']['bytes'])} GiB) | "
                f"{gib(r['peak_overcommitted'])} | {gib(b['reserve'])} |"
            )
        elif scenario == "admission":
            b, a, adm = r["before"], r["after"], r["admission"]
            freed = sum(s["freed"] for s in r["steps"]) + (4 * GIB - r["host_resident"])
            rows.append(
                f"| admission | {semantics} | {reserve} | {gib(b['true_free'])} → "
                f"{gib(a['true_free'])} | {gib(b['host_view'])} → {gib(a['host_view'])} | "
                f"{gib(freed)} / {gib(max(0, adm['need'] - adm['free_before']))} | "
                f"{a['demotions']['count']} | {gib(r['peak_overcommitted'])} | "
                f"{gib(a['reserve'])} |"
            )
        else:
            rounds = r["rounds"]
            for who, mine in (("worker", lambda x: x["actor"] != "host"), ("host", None)):
                loads = [x for x in rounds if (mine(x) if mine else x["actor"] == "host")]
                evicted = sum(x["evicted"] for x in loads)
                if who == "worker":
                    minimum = sum(
                        max(0, a["need"] - a["free_before"]) for x in loads for a in x["admissions"]
                    )
                else:
                    minimum = sum(
                        max(0, need(x["loaded"], r["base_reserve"]) - x["free_before"])
                        for x in loads
                        if x["loaded"]
                    )
                rows.append(
                    f"| contention, {len(loads)} {who} loads of {len(rounds)} rounds | "
                    f"{semantics} | {reserve} | {gib(rounds[0]['free_before'])} → "
                    f"{gib(rounds[-1]['free_after'])} | - | {gib(evicted)} / {gib(minimum)} | "
                    f"{sum(1 for x in loads if x['demoted'])} | {gib(r['peak_overcommitted'])} | "
                    f"{gib(r['reserve_end'])} |"
                )
    return "\n".join(rows) + "\n"


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        (("headline", "wddm", "off"), "WDDM, without the reserve"),
        (("headline", "wddm", "on"), "WDDM, with the reserve"),
        (("headline", "device_wide", "on"), "device-wide (Linux)"),
        (("headline_small", "wddm", "on"), "WDDM, with the reserve, six 2 GiB models"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(20, 5.5), sharey=True)
    for ax, (key, title) in zip(axes, panels, strict=True):
        r = results[key]
        trace = r["trace"]
        cols = trace["columns"]
        marks = {label: t for t, label in trace["marks"]}
        # Milliseconds from the host's call to load_models_gpu, a little before and after it.
        t0, t1 = marks["host loads 6 GiB"], marks["host loaded"]
        lo, hi = -0.25 * (t1 - t0) * 1000 - 0.2, (t1 - t0) * 1000 * 1.25 + 0.2
        samples = [[(s[0] - t0) * 1000, *s[1:]] for s in trace["samples"]]
        # The state the load starts from: the card as the scenario marked it just before.
        ready = (marks["worker holds 12 GiB"] - t0) * 1000
        start = [s for s in samples if s[0] <= ready][-1]
        window = [[lo, *start[1:]]] + [s for s in samples if ready < s[0] <= hi]
        window.append([hi, *window[-1][1:]])
        styles = {
            "true_free": ("true free (NVML)", "black", "-"),
            "host_view": ("host's view (get_free_memory)", "tab:red", "--"),
            "reserve": ("EXTRA_RESERVED_VRAM", "tab:green", ":"),
        }
        for i, col in enumerate(cols[1:], start=1):
            label, color, ls = styles.get(col, ("worker's view", "tab:blue", "-."))
            xs = [s[0] for s in window]
            ys = [s[i] / GIB if i < len(s) else float("nan") for s in window]
            ax.step(xs, ys, where="post", label=label, color=color, linestyle=ls, linewidth=1.6)
        for label in ("host loads 6 GiB", "host loaded"):
            x = (marks[label] - t0) * 1000
            ax.axvline(x, color="grey", linewidth=0.6)
            ax.text(x, 16.8, label, rotation=90, fontsize=7, va="top", ha="right")
        ax.set_title(
            f"{title}\nevicted {gib(r['evicted'])} GiB (minimum {gib(r['optimal_evicted'])}), "
            f"demotions {r['after']['demotions']['count']} "
            f"({gib(r['after']['demotions']['bytes'])} GiB)",
            fontsize=10,
        )
        ax.set_xlabel("ms from the host's load_models_gpu call")
        ax.set_xlim(lo, hi)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("GiB")
    axes[0].set_ylim(-0.5, 17)
    axes[-1].legend(loc="lower right", fontsize=8)
    fig.suptitle(
        "A worker holds 12 GiB of a 16 GiB card; the host loads 6 GiB through upstream's "
        "load_models_gpu (simulated card, real upstream ComfyUI 0.30.0, real worker)"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=str(REPO / ".venv" / "bin" / "python"))
    ap.add_argument("--out", default=str(REPO / "bench" / "out"))
    ap.add_argument("--png", default=str(REPO / "docs" / "memory-headline.png"))
    ap.add_argument(
        "--scenarios",
        default="",
        help="comma-separated subset (default: all; the plot needs headline and headline_small)",
    )
    args = ap.parse_args()
    only = set(filter(None, args.scenarios.split(",")))
    runs = [k for k in RUNS if not only or k[0] in only]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=3) as pool:
        futures = {k: pool.submit(run, args.python, *k, Path(tmp)) for k in runs}
        results = {k: f.result() for k, f in futures.items()}
    (out / "memory.json").write_text(
        json.dumps([{"run": list(k), **v} for k, v in results.items()], indent=1)
    )
    md = table(results)
    (out / "memory.md").write_text(md)
    if {"headline", "headline_small"} <= {k[0] for k in runs}:
        plot(results, Path(args.png))
    print(md)
    print(f"wrote {out / 'memory.json'}, {out / 'memory.md'}, {args.png}")


if __name__ == "__main__":
    main()

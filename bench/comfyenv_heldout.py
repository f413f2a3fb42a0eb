"""Held-out comfy-env packs: is each accepted, and does every conda, PyPI and ``[cuda]``
requirement of each of its envs resolve, or fail with a named error? (issue 18)

Takes a folder holding real comfy-env packs (one folder each, as their authors ship them, or
only their ``comfy-env.toml`` files at their places), links them into a scratch
``isolated_nodes/``, runs ``airlock plan --json`` on them (nothing is installed: rattler solves
the conda request, the ``[cuda]`` wheel index is read, ``uv pip compile`` resolves the PyPI
requirements for the env's Python) and prints a table per env. ``--cuda`` sets the CUDA the
``[cuda]`` wheels are matched for (``AIRLOCK_CUDA_VERSION``): without it a host whose torch has
no CUDA skips them, as comfy-env does.

    .venv/bin/python bench/comfyenv_heldout.py /work/corpus/comfyenv --cuda 12.8 \\
        --raw bench/results/comfyenv_heldout.json > bench/results/comfyenv_heldout.md

The packs' code is never copied into this repository; only the result is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def plan(packs: Path, comfyui: Path, cuda: str | None, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="airlock-heldout-") as tmp:
        base = Path(tmp) / "base"
        (base / "isolated_nodes").mkdir(parents=True)
        for p in sorted(packs.iterdir()):
            if p.is_dir() and not p.name.startswith("."):
                (base / "isolated_nodes" / p.name).symlink_to(p.resolve())
        env = dict(os.environ)
        env.pop("AIRLOCK_PACKS_PATH", None)
        if cuda:
            env["AIRLOCK_CUDA_VERSION"] = cuda
        cmd = [
            sys.executable, "-m", "comfy_airlock.cli", "--home", str(Path(tmp) / "home"),
            "plan", "--base", str(base), "--comfyui", str(comfyui), "--json",
        ]  # fmt: skip
        start = time.monotonic()
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        took = time.monotonic() - start
        if not out.stdout.strip():
            sys.exit(f"airlock plan printed nothing (exit {out.returncode}):\n{out.stderr}")
        doc = json.loads(out.stdout)
        doc["seconds"] = round(took, 1)
        doc["exit"] = out.returncode
        doc["cuda"] = cuda
        return doc


def counts(outcomes: list[dict]) -> str:
    ok = sum(1 for o in outcomes if o["resolved"])
    return f"{ok}/{len(outcomes)}" if outcomes else "-"


def errors(env: dict) -> list[str]:
    """Each distinct error once, with the requirements it stopped."""
    by_error: dict[str, list[str]] = {}
    for kind in ("conda", "pypi", "cuda"):
        for o in env[kind]:
            if o["error"]:
                by_error.setdefault(f"{kind}: {o['error']}", []).append(o["requirement"])
    return [f"{e} [{', '.join(reqs)}]" for e, reqs in by_error.items()]


def table(doc: dict) -> str:
    lines = [
        "| env | accepted | python | conda resolved | pypi resolved | cuda resolved |",
        "|---|---|---|---|---|---|",
    ]
    notes = []
    for env in doc["envs"]:
        name = env["name"]
        accepted = "no" if env["refused"] else "yes"
        lines.append(
            f"| {name} | {accepted} | {env['python'] or '-'} | {counts(env['conda'])} "
            f"| {counts(env['pypi'])} | {counts(env['cuda'])} |"
        )
        if env["refused"]:
            notes.append(f"- **{name}** refused: {env['refused']}")
        for e in errors(env):
            notes.append(f"- **{name}** {e}")
    envs = doc["envs"]
    total = {
        k: (
            sum(1 for e in envs for o in e[k] if o["resolved"]),
            sum(len(e[k]) for e in envs),
        )
        for k in ("conda", "pypi", "cuda")
    }
    packs = {e["dir"] for e in envs}
    summary = (
        f"{len(packs)} packs, {len(envs)} envs, "
        f"{sum(1 for e in envs if not e['refused'])} accepted; resolved: "
        + ", ".join(f"{k} {a}/{b}" for k, (a, b) in total.items())
        + f" ({doc['seconds']} s, CUDA target {doc['cuda'] or 'none'})"
    )
    return "\n".join([summary, "", *lines, "", *notes, ""])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("packs", type=Path, help="folder of comfy-env packs")
    default = os.environ.get("COMFYUI_DIR") or REPO / ".cache/comfyui/0.30.0/ComfyUI"
    ap.add_argument("--comfyui", type=Path, default=Path(default))
    ap.add_argument("--cuda", help="CUDA version to match [cuda] wheels for, e.g. 12.8")
    ap.add_argument("--raw", type=Path, help="where to write airlock plan's JSON")
    ap.add_argument("--timeout", type=float, default=3600)
    a = ap.parse_args()
    doc = plan(a.packs, a.comfyui, a.cuda, a.timeout)
    if a.raw:
        a.raw.write_text(json.dumps(doc, indent=1) + "\n")
    print(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

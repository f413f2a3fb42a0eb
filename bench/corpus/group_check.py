"""ComfyUI-Impact-Pack and ComfyUI-Inspire-Pack isolated apart (each its own worker) and as one
group (ADR 0054), in the real ComfyUI: Inspire's ``on_prompt`` handler fills a
``WildcardEncode //Inspire`` node's wildcards with Impact's
``nodes.NODE_CLASS_MAPPINGS['ImpactWildcardProcessor'].process`` and tells the browser
(``inspire-node-feedback``), as natively. The prompt then fails validation (it has no model):
only the handler's work is looked at.

    .venv/bin/python -m bench.corpus.group_check group|apart \\
        --impact /work/corpus/packs/ComfyUI-Impact-Pack \\
        --inspire /work/corpus/packs-extra/ComfyUI-Inspire-Pack --work /work/corpus/group

The packs are copied as an install leaves them (Impact with its ``impact_subpack``); the
environment gets Impact's, its subpack's and Inspire's ``requirements.txt`` (what
ComfyUI-Manager and Impact's ``install.py`` install), one env for the group, one each apart.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.comfyui.harness import DEFAULT_COMFYUI_DIR, ComfyUI, make_base_dir  # noqa: E402

WILDCARDS = "a {red|green|blue|yellow} cat, {1-3$$small|big|old|young} dog"


def _requirements(*files: Path) -> list[str]:
    out: list[str] = []
    for f in files:
        for line in f.read_text().splitlines():
            if line.strip() and line.strip() not in out:
                out.append(line.strip())
    return out


def _copy(src: Path, dst: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", ".git")
    shutil.copytree(src, dst, symlinks=True, ignore=ignore)


def place(mode: str, impact: Path, inspire: Path, work: Path) -> Path:
    base = make_base_dir(work, custom_nodes={"comfy-airlock": REPO / "custom_node"})
    impact_reqs = [impact / "requirements.txt", impact / "impact_subpack" / "requirements.txt"]
    if mode == "group":
        group = base / "isolated_nodes" / "impact-inspire"
        group.mkdir()
        for pack in (impact, inspire):
            _copy(pack, group / pack.name)
        reqs = _requirements(*impact_reqs, inspire / "requirements.txt")
        names = json.dumps([impact.name, inspire.name])
        (group / "airlock.toml").write_text(f"packs = {names}\ndependencies = {json.dumps(reqs)}\n")
    else:
        for pack, files in ((impact, impact_reqs), (inspire, [inspire / "requirements.txt"])):
            _copy(pack, base / "isolated_nodes" / pack.name)
            deps = json.dumps(_requirements(*files))
            (base / "isolated_nodes" / pack.name / "airlock.toml").write_text(
                f"dependencies = {deps}\n"
            )
    return base


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["group", "apart"])
    parser.add_argument("--impact", type=Path, required=True)
    parser.add_argument("--inspire", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/work/corpus/group"))
    parser.add_argument("--home", default="/work/corpus/airlock-home", help="AIRLOCK_HOME")
    args = parser.parse_args(argv)
    work = args.work / args.mode
    shutil.rmtree(work, ignore_errors=True)
    base = place(args.mode, args.impact.resolve(), args.inspire.resolve(), work)
    env = {"AIRLOCK_HOME": args.home, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    comfyui = Path(os.environ.get("COMFYUI_DIR", DEFAULT_COMFYUI_DIR))
    ui = ComfyUI(comfyui, base, env=env, startup_timeout=3000, start=False)
    t = time.monotonic()
    ui.start()
    print(f"mode {args.mode}: ComfyUI started in {time.monotonic() - t:.0f} s")
    try:
        node = {"mode": "populate", "populated_text": "", "seed": 3, "wildcard_text": WILDCARDS}
        prompt = {
            "1": {"class_type": "WildcardEncode //Inspire", "inputs": node},
            "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 2]}},
        }
        status, body, _ = ui.request(
            "POST", "/prompt", {"prompt": prompt, "client_id": ui.client_id}
        )
        print(f"POST /prompt: HTTP {status} ({json.loads(body)['error']['type']})")
        time.sleep(2)
        feedback = [m["data"] for m in ui.messages(type="inspire-node-feedback")]
        print("inspire-node-feedback:", json.dumps(feedback))
        for line in ui.log_text().splitlines():
            keep = ("node(s) isolated", "Impact Pack is outdated", "in one group")
            if any(k in line for k in keep):
                print("log:", line.split("] ", 1)[-1])
    finally:
        ui.stop()
        (work / "server.log").write_text(ui.log_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

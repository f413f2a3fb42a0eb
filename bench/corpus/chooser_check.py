"""A node that waits, while it runs, for an HTTP message from the browser, native against
isolated in the real ComfyUI. Two real packs' choosers:

- ``cg`` (cg-image-picker's "Preview Chooser"): previews its images, sends
  ``early-image-handler``, then loops on ``time.sleep(0.1)`` until the page POSTs the pick as a
  form to ``/image_chooser_message`` (its ``MessageHolder``, shared by the route and the node);
- ``easy-use`` (ComfyUI-Easy-Use's ``easy imageChooser``): sends ``easyuse-image-choose``, then
  loops until the page POSTs JSON ``{"node_id", "selected", "action"}`` to
  ``/easyuse/image_chooser_message``, whose handler fills the node's entry in a shared cache.

The script plays the page: it queues the prompt, waits for the node's message, POSTs the pick
and times the prompt's end.

    .venv/bin/python -m bench.corpus.chooser_check native|isolated \\
        --pack /work/corpus/packs-new2/cg-image-picker --work /work/corpus/chooser
    .venv/bin/python -m bench.corpus.chooser_check native|isolated --kind easy-use \\
        --pack /work/corpus/packs-extra/ComfyUI-Easy-Use --work /work/corpus/chooser-easy \\
        --toml <the airlock.toml `airlock isolate` wrote> --python <a venv with its packages>
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.comfyui.harness import DEFAULT_COMFYUI_DIR, ComfyUI, make_base_dir  # noqa: E402


def _post(url: str, body: bytes, content_type: str) -> tuple[int, bytes]:
    """A POST as the page's ``fetch`` sends it; HTTP errors and a refused connection are
    answers too."""
    req = urllib.request.Request(url, data=body, method="POST")
    req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=150) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError as e:
        return -1, str(e).encode()


def _post_form(url: str, fields: dict) -> tuple[int, bytes]:
    """cg-image-picker's page: a form (its route reads ``request.post()``)."""
    body = urllib.parse.urlencode(fields).encode()
    return _post(url, body, "application/x-www-form-urlencoded")


def _post_json(url: str, data: dict) -> tuple[int, bytes]:
    """Easy-Use's page: JSON (its route reads ``request.json()``)."""
    return _post(url, json.dumps(data).encode(), "application/json")


def _empty(color: int) -> dict:
    return {
        "class_type": "EmptyImage",
        "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": color},
    }


# kind -> (the prompt, the node's message type, the route, the pick for the node id, the output)
KINDS = {
    "cg": (
        {
            "1": {
                "class_type": "EmptyImage",
                "inputs": {"width": 64, "height": 64, "batch_size": 2, "color": 0},
            },
            "2": {
                "class_type": "Preview Chooser",
                "inputs": {"images": ["1", 0], "mode": "Always pause", "count": 1},
            },
            "3": {"class_type": "PreviewAny", "inputs": {"source": ["2", 3]}},
        },
        "early-image-handler",
        "/image_chooser_message",
        lambda url, node: _post_form(url, {"id": node, "message": "1"}),
    ),
    "easy-use": (
        {
            "1": _empty(0),
            "4": _empty(0xFFFFFF),
            "5": {"class_type": "ImageBatch", "inputs": {"image1": ["1", 0], "image2": ["4", 0]}},
            "2": {
                "class_type": "easy imageChooser",
                "inputs": {"images": ["5", 0], "mode": "Always Pause", "preview_rescale": 1.0},
            },
            "3": {"class_type": "PreviewAny", "inputs": {"source": ["2", 0]}},
        },
        "easyuse-image-choose",
        "/easyuse/image_chooser_message",
        lambda url, node: _post_json(url, {"node_id": node, "selected": [1], "action": "select"}),
    ),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["native", "isolated"])
    parser.add_argument("--pack", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/work/corpus/chooser"))
    parser.add_argument("--home", default="/work/corpus/airlock-home", help="AIRLOCK_HOME")
    parser.add_argument("--wait", type=float, default=90.0, help="seconds to wait for the end")
    parser.add_argument("--kind", choices=sorted(KINDS), default="cg")
    parser.add_argument("--toml", type=Path, help="the pack's airlock.toml (isolated)")
    parser.add_argument("--python", help="the native side's interpreter (default: this venv's)")
    args = parser.parse_args(argv)
    prompt, message, route, pick = KINDS[args.kind]
    work = args.work / args.mode
    shutil.rmtree(work, ignore_errors=True)
    base = make_base_dir(work, custom_nodes={"comfy-airlock": REPO / "custom_node"})
    sub = "custom_nodes" if args.mode == "native" else "isolated_nodes"
    dst = base / sub / args.pack.name
    shutil.copytree(args.pack, dst, ignore=shutil.ignore_patterns("__pycache__"))
    if args.mode == "isolated" and args.toml is not None:
        shutil.copy(args.toml, dst / "airlock.toml")
    elif args.mode == "isolated":
        (dst / "airlock.toml").write_text("dependencies = []\n")  # it lists none
    comfyui = Path(os.environ.get("COMFYUI_DIR", DEFAULT_COMFYUI_DIR))
    env = {"AIRLOCK_HOME": args.home}
    python = args.python if args.mode == "native" and args.python else None
    ui = ComfyUI(comfyui, base, env=env, startup_timeout=1800, start=False, python=python)
    ui.start()
    try:
        t0 = time.monotonic()
        prompt_id = ui.queue(prompt)
        shown = ui.wait_message(type=message, timeout=120)
        t_shown = time.monotonic() - t0
        print(
            f"{args.mode}: the node showed its images after {t_shown:.2f} s: {shown['data']['id']}"
        )
        t1 = time.monotonic()
        status, answer = pick(ui.url + route, shown["data"]["id"])
        print(
            f"{args.mode}: POST {route}: HTTP {status} after "
            f"{time.monotonic() - t1:.2f} s {answer[:200]!r}"
        )
        try:
            entry = ui.wait(prompt_id, timeout=args.wait)
            selected = [str(t)[:60] for t in entry["outputs"].get("3", {}).get("text") or []]
            print(
                f"{args.mode}: the prompt ended {time.monotonic() - t1:.2f} s after the POST: "
                f"{entry['status']['status_str']}, selected {json.dumps(selected)}"
            )
        except Exception as e:
            print(
                f"{args.mode}: the prompt did not end within {args.wait:.0f} s of the POST: "
                f"{type(e).__name__}"
            )
            ui.post("/interrupt", {})
            t2 = time.monotonic()
            try:
                entry = ui.wait(prompt_id, timeout=120)
                print(
                    f"{args.mode}: after POST /interrupt it ended in "
                    f"{time.monotonic() - t2:.2f} s: {entry['status']['status_str']}"
                )
            except Exception as e2:
                print(f"{args.mode}: not ended 120 s after POST /interrupt: {type(e2).__name__}")
    finally:
        ui.stop()
        (work / "server.log").write_text(ui.log_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

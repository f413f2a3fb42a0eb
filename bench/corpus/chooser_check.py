"""A node that waits, while it runs, for an HTTP message from the browser, native against
isolated in the real ComfyUI: cg-image-picker's "Preview Chooser" previews its images, then
loops on ``time.sleep(0.1)`` until the page POSTs the user's pick to its route
``/image_chooser_message`` (its ``MessageHolder``, shared by the route and the node). This
script plays the page: it queues the prompt, waits for the node's ``early-image-handler``
message, POSTs the pick and times the prompt's end.

    .venv/bin/python -m bench.corpus.chooser_check native|isolated \\
        --pack /work/corpus/packs-new2/cg-image-picker --work /work/corpus/chooser
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


def _post_form(url: str, body: bytes) -> tuple[int, bytes]:
    """A form POST as the page's ``fetch`` sends it (the route reads ``request.post()``)."""
    req = urllib.request.Request(url, data=body, method="POST")
    req.add_header("Content-Type", "application/x-www-form-urlencoded")
    try:
        with urllib.request.urlopen(req, timeout=150) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError as e:
        return -1, str(e).encode()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["native", "isolated"])
    parser.add_argument("--pack", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/work/corpus/chooser"))
    parser.add_argument("--home", default="/work/corpus/airlock-home", help="AIRLOCK_HOME")
    parser.add_argument("--wait", type=float, default=90.0, help="seconds to wait for the end")
    args = parser.parse_args(argv)
    work = args.work / args.mode
    shutil.rmtree(work, ignore_errors=True)
    base = make_base_dir(work, custom_nodes={"comfy-airlock": REPO / "custom_node"})
    sub = "custom_nodes" if args.mode == "native" else "isolated_nodes"
    dst = base / sub / args.pack.name
    shutil.copytree(args.pack, dst, ignore=shutil.ignore_patterns("__pycache__"))
    if args.mode == "isolated":
        (dst / "airlock.toml").write_text("dependencies = []\n")  # it lists none
    comfyui = Path(os.environ.get("COMFYUI_DIR", DEFAULT_COMFYUI_DIR))
    env = {"AIRLOCK_HOME": args.home}
    ui = ComfyUI(comfyui, base, env=env, startup_timeout=1800, start=False)
    ui.start()
    try:
        prompt = {
            "1": {
                "class_type": "EmptyImage",
                "inputs": {"width": 64, "height": 64, "batch_size": 2, "color": 0},
            },
            "2": {
                "class_type": "Preview Chooser",
                "inputs": {"images": ["1", 0], "mode": "Always pause", "count": 1},
            },
            "3": {"class_type": "PreviewAny", "inputs": {"source": ["2", 3]}},
        }
        t0 = time.monotonic()
        prompt_id = ui.queue(prompt)
        shown = ui.wait_message(type="early-image-handler", timeout=60)
        t_shown = time.monotonic() - t0
        print(
            f"{args.mode}: the node showed its images after {t_shown:.2f} s: {shown['data']['id']}"
        )
        body = urllib.parse.urlencode({"id": shown["data"]["id"], "message": "1"}).encode()
        t1 = time.monotonic()
        status, answer = _post_form(ui.url + "/image_chooser_message", body)
        print(
            f"{args.mode}: POST /image_chooser_message: HTTP {status} after "
            f"{time.monotonic() - t1:.2f} s {answer[:200]!r}"
        )
        try:
            entry = ui.wait(prompt_id, timeout=args.wait)
            selected = entry["outputs"].get("3", {}).get("text")
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

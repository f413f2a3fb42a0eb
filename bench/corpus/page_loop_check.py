"""ComfyUI-Purz's interactive filter with a page in the loop, natively and isolated.

The node (``PurzInteractiveFilter``) saves its input, tells the page ``purz.batch_pending``
(``send_sync``, while it runs), and polls its module's state until the page has POSTed the
frames it rendered with WebGL to ``/purz/interactive/set_rendered_batch``; its output is those
frames. The corpus has no browser, so there the node waits until it times out on both sides.
Here this script is the page: it waits for the message on ComfyUI's websocket, asks the
pack's ``GET /purz/interactive/batch_pending/<node>`` as the page's poll does, and POSTs one
rendered frame (the input inverted, as a PNG data URL). Isolated, the message has to leave
the worker while the node runs, and the POST has to reach the worker's route while its node
runs (ADRs 0055, 0056), into the same module state the node polls.

Run: ``.venv/bin/python bench/corpus/page_loop_check.py PACK_DIR NATIVE_PYTHON OUT_DIR``:
``NATIVE_PYTHON`` is a venv holding the pack's packages (the corpus's native venv for it,
``native_python`` in its result); the isolated side uses the environment ``AIRLOCK_HOME`` has
(default ``/work/corpus/airlock-home``), built from the ``airlock.toml`` isolate writes.
"""

import base64
import io
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "python"))
from PIL import Image  # noqa: E402

from comfy_airlock import isolated_toml, pack_requirements  # noqa: E402
from tests.comfyui.harness import DEFAULT_COMFYUI_DIR, ComfyUI, make_base_dir  # noqa: E402

PACK = Path(sys.argv[1])
NATIVE_PY = sys.argv[2]
OUT = Path(sys.argv[3])
SIZE = 64
env = {
    "AIRLOCK_HOME": os.environ.get("AIRLOCK_HOME", "/work/corpus/airlock-home"),
    "PYTHONHASHSEED": "0",
    "CORPUS_PROBE_SIZE": str(SIZE),
}
prompt = {
    "1": {"class_type": "CorpusImage", "inputs": {}},
    "2": {"class_type": "PurzInteractiveFilter", "inputs": {"image": ["1", 0]}},
    "3": {"class_type": "CorpusDigest", "inputs": {"value": ["2", 0]}},
    "4": {"class_type": "CorpusDigest", "inputs": {"value": ["1", 0]}},
}


def rendered_frame() -> str:
    """What the page would send: the probe's ramp image inverted, a PNG data URL."""
    n = SIZE * SIZE * 3
    ramp = bytes(round((i % 251) / 250.0 * 255) for i in range(n))
    img = Image.frombytes("RGB", (SIZE, SIZE), bytes(255 - b for b in ramp))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def run_side(ui: ComfyUI) -> dict:
    r: dict = {"nodes": sorted(n for n in ui.object_info() if n.startswith("Purz"))}
    t0 = time.monotonic()
    pid = ui.queue(prompt)
    msg = ui.wait_message(type="purz.batch_pending", timeout=120)
    r["message_after_s"] = round(time.monotonic() - t0, 2)
    data = msg["data"]
    r["message"] = {k: data.get(k) for k in ("node_id", "batch_size")}
    # The page's poll, while the node waits.
    r["pending_route"] = ui.get(f"/purz/interactive/batch_pending/{data['node_id']}")
    t1 = time.monotonic()
    r["post"] = ui.post(
        "/purz/interactive/set_rendered_batch",
        {
            "node_id": data["node_id"],
            "batch_id": data["batch_id"],
            "rendered_frames": [rendered_frame()],
            "chunk_index": 0,
            "total_chunks": 1,
            "is_final": True,
        },
    )
    entry = ui.wait(pid, timeout=120)
    r["done_after_post_s"] = round(time.monotonic() - t1, 2)
    r["status"] = (entry.get("status") or {}).get("status_str")
    outs = entry.get("outputs") or {}
    r["output_digest"] = (outs.get("3") or {}).get("corpus_digest")
    r["input_digest"] = (outs.get("4") or {}).get("corpus_digest")
    r["ui_images"] = len((outs.get("2") or {}).get("purz_images") or [])
    return r


work = Path(tempfile.mkdtemp())
OUT.mkdir(parents=True, exist_ok=True)
probe = REPO / "bench" / "corpus" / "probe"
res = {}
for side in ("native", "isolated"):
    if side == "native":
        nodes = {"airlock-corpus-probe": probe, PACK.name: PACK}
        base = make_base_dir(work, custom_nodes=nodes, copy=True, name=side)
        py = NATIVE_PY
    else:
        nodes = {"airlock-corpus-probe": probe, "comfy-airlock": REPO / "custom_node"}
        base = make_base_dir(work, custom_nodes=nodes, isolated={PACK.name: PACK}, copy=True)
        dst = base / "isolated_nodes" / PACK.name
        isolated_toml.write_toml(dst, PACK.name, pack_requirements.read_pack_needs(dst), {})
        py = None  # ComfyUI's own venv
    with ComfyUI(DEFAULT_COMFYUI_DIR, base, python=py, env=env) as ui:
        try:
            res[side] = run_side(ui)
        except Exception as e:  # recorded, with the log: the other side still runs
            res[side] = {"error": f"{type(e).__name__}: {e}"}
        (OUT / f"{side}.log").write_text(ui.log_text())
    print(side, json.dumps(res[side]), flush=True)
res["same_output"] = res["native"].get("output_digest") == res["isolated"].get("output_digest")
res["output_is_the_page_frame"] = all(
    res[s].get("output_digest") not in (None, res[s].get("input_digest"))
    for s in ("native", "isolated")
)
print(
    "same output:",
    res["same_output"],
    "| output is the page's frame:",
    res["output_is_the_page_frame"],
)
(OUT / "result.json").write_text(json.dumps(res, indent=1) + "\n")
shutil.rmtree(work, ignore_errors=True)

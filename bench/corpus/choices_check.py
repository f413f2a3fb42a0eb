"""ComfyUI's own KSampler's sampler and scheduler lists with a pack loaded natively and
isolated (ADR 0053's amendment: RES4LYF adds its samplers and schedulers to ComfyUI's lists
at import; isolated, it does so in its worker only). Records both lists on each side and what
the isolated side's log says.

Run: ``.venv/bin/python bench/corpus/choices_check.py PACK_DIR NATIVE_PYTHON OUT_DIR``
(``NATIVE_PYTHON``: a venv with the pack's packages, the corpus's ``native_python``; the
isolated side uses the environment ``AIRLOCK_HOME`` has, default
``/work/corpus/airlock-home``).
"""

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "python"))
from comfy_airlock import isolated_toml, pack_requirements  # noqa: E402
from tests.comfyui.harness import DEFAULT_COMFYUI_DIR, ComfyUI, make_base_dir  # noqa: E402

PACK, NATIVE_PY, OUT = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
env = {"AIRLOCK_HOME": os.environ.get("AIRLOCK_HOME", "/work/corpus/airlock-home")}
work = Path(tempfile.mkdtemp())
OUT.mkdir(parents=True, exist_ok=True)
res: dict = {}
for side in ("bare", "native", "isolated"):
    if side == "bare":  # ComfyUI without the pack: its own lists
        base, py = make_base_dir(work, name=side), NATIVE_PY
    elif side == "native":
        base = make_base_dir(work, custom_nodes={PACK.name: PACK}, copy=True, name=side)
        py = NATIVE_PY
    else:
        nodes = {"comfy-airlock": REPO / "custom_node"}
        base = make_base_dir(work, custom_nodes=nodes, isolated={PACK.name: PACK}, copy=True)
        dst = base / "isolated_nodes" / PACK.name
        isolated_toml.write_toml(dst, PACK.name, pack_requirements.read_pack_needs(dst), {})
        py = None
    with ComfyUI(DEFAULT_COMFYUI_DIR, base, python=py, env=env, websocket=False) as ui:
        required = ui.object_info("KSampler")["KSampler"]["input"]["required"]
        log = ui.log_text()
    res[side] = {
        "samplers": required["sampler_name"][0],
        "schedulers": required["scheduler"][0],
        "note": [ln for ln in log.splitlines() if "to ComfyUI's own lists" in ln],
    }
    (OUT / f"{side}.log").write_text(log)
for side in ("native", "isolated"):
    res[f"{side}_adds"] = {
        kind: [x for x in res[side][kind] if x not in res["bare"][kind]]
        for kind in ("samplers", "schedulers")
    }
    print(side, "adds to KSampler:", json.dumps(res[f"{side}_adds"]))
print("isolated log:", res["isolated"]["note"])
(OUT / "result.json").write_text(json.dumps(res, indent=1) + "\n")
shutil.rmtree(work, ignore_errors=True)

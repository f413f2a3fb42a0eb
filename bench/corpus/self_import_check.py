"""ComfyUI-SaveImageWithMetaData as a user has it: natively in ComfyUI's own ``custom_nodes/``
(a copy of the tree, so ``custom_nodes.<pack>`` resolves as it does for a user), and isolated;
one prompt ``EmptyImage -> SaveImageWithMetaData`` on each. The pack imports ``piexif``
undeclared: ``PYTHON`` is a copy of the host venv that has it (``bench/corpus/envs.host_with``,
as ``run.py --host-has piexif`` makes it).

Run: ``.venv/bin/python bench/corpus/self_import_check.py PACK_DIR PYTHON OUT_DIR``.
"""

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from tests.comfyui.harness import DEFAULT_COMFYUI_DIR, ComfyUI, make_base_dir  # noqa: E402

PACK = Path(sys.argv[1])
PY = sys.argv[2]
OUT = Path(sys.argv[3])
env = {
    "AIRLOCK_HOME": os.environ.get("AIRLOCK_HOME", "/work/corpus/airlock-home"),
    "PYTHONHASHSEED": "0",
}
prompt = {
    "1": {
        "class_type": "EmptyImage",
        "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 255},
    },
    "2": {"class_type": "SaveImageWithMetaData", "inputs": {"images": ["1", 0]}},
}
work = Path(tempfile.mkdtemp())
res = {}
tree = work / "ComfyUI"
shutil.copytree(DEFAULT_COMFYUI_DIR, tree, ignore=shutil.ignore_patterns("__pycache__"))
shutil.copytree(PACK, tree / "custom_nodes" / PACK.name)
base = make_base_dir(work, name="native")
shutil.rmtree(base / "custom_nodes")
(base / "custom_nodes").symlink_to(tree / "custom_nodes")  # the pack in ComfyUI's own folder
for side in ("native", "isolated"):
    if side == "isolated":
        base = make_base_dir(work, custom_nodes={"comfy-airlock": REPO / "custom_node"}, name="iso")
        shutil.copytree(PACK, base / "isolated_nodes" / PACK.name)
        (base / "isolated_nodes" / PACK.name / "airlock.toml").write_text(
            'dependencies = ["piexif==1.1.3"]\n'
        )
    comfy = tree if side == "native" else DEFAULT_COMFYUI_DIR
    with ComfyUI(comfy, base, python=PY, env=env, websocket=False) as ui:
        info = ui.object_info()
        nodes = sorted(n for n, m in info.items() if PACK.name in str(m.get("python_module", "")))
        r = {"nodes": nodes}
        if "SaveImageWithMetaData" in nodes:
            full = dict(prompt)
            full["2"]["inputs"].update(
                {
                    k: v[1].get("default") if len(v) > 1 and isinstance(v[1], dict) else v[0][0]
                    for k, v in info["SaveImageWithMetaData"]["input"]["required"].items()
                    if k != "images"
                }
            )
            entry = ui.run(full, check=False)
            st = entry.get("status") or {}
            r["status"] = st.get("status_str")
            errs = [m for m in st.get("messages", []) if m[0] == "execution_error"]
            r["error"] = (
                (errs[0][1].get("exception_type"), errs[0][1].get("exception_message"))
                if errs
                else None
            )
            r["files"] = [
                o.get("filename")
                for v in (entry.get("outputs") or {}).values()
                for o in v.get("images", [])
            ]
        (OUT / f"{side}.log").write_text(ui.log_text())
    res[side] = r
    print(side, json.dumps(r), flush=True)
(OUT / "result.json").write_text(json.dumps(res, indent=1) + "\n")
shutil.rmtree(work, ignore_errors=True)

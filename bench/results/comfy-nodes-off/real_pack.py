"""A real public pack with and without ``comfy-nodes = false`` (ADR 0060): christian-byrne's
audio-separation-nodes-comfyui (``ac33956``, the corpus copy in /work/corpus, never committed),
its requirements as its ``airlock.toml``, loaded by the host's loader with the real ComfyUI
0.30.0 (tests/comfyui/scenario_host.py's host), then its AudioCrop node run on a 3 s waveform.

Run from tests/comfyui as ``python real_pack.py off default`` (the order given), with the test
venv, ``COMFYUI_DIR`` and an ``AIRLOCK_HOME`` (the corpus home: its environment was built)."""

import json
import shutil
import sys
import time

sys.path.insert(0, "/work/main/tests/comfyui")
import torch
from scenario_host import TMP, close_all, loader

SRC = "/work/corpus/packs-new6/audio-separation-nodes-comfyui"
out = {}
with open(SRC + "/requirements.txt") as f:
    reqs = [line.strip() for line in f if line.strip()]
try:
    for mode in sys.argv[1:]:
        d = TMP / mode / "audio-separation-nodes-comfyui"
        shutil.copytree(SRC, d, ignore=shutil.ignore_patterns("__pycache__", ".git"))
        toml = "dependencies = " + json.dumps(reqs) + "\n"
        if mode == "off":
            toml += "comfy-nodes = false\n"
        (d / "airlock.toml").write_text(toml)
        t0 = time.monotonic()
        mappings, _ = loader.load_pack(str(d), mode)
        pack = loader._PACKS[mode]
        pack.scan()
        t1 = time.monotonic()
        wave = torch.linspace(-1, 1, 44100 * 3).reshape(1, 1, -1)
        audio = {"waveform": wave, "sample_rate": 44100}
        args = {"audio": audio, "start_time": "0:01", "end_time": "0:02"}
        (cropped,) = pack.call("comfy_airlock.worker.comfy:run", "AudioCrop", "1", "main", args)
        t2 = time.monotonic()
        out[mode] = {
            "nodes": sorted(mappings),
            "scan_s": round(t1 - t0, 2),
            "crop_s": round(t2 - t1, 2),
            "crop_shape": list(cropped["waveform"].shape),
            "crop_equal": bool(torch.equal(cropped["waveform"], wave[..., 44100:88200])),
        }
finally:
    close_all()
print("RESULT " + json.dumps(out))

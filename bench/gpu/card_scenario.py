"""The memory bridge on a real card (issue 17, item 8): what tests/comfyui/vram_scenarios.py
checks on the simulated card, once against the real one.

This process is ComfyUI's side: the real upstream ``comfy.model_management`` (the tree at
``$COMFYUI_DIR``) on the GPU, in the VRAM state upstream picks for it (NORMAL_VRAM on a card
this size), and comfy-airlock's host modules. One real worker of ``tests/packs/memory-pack``
runs on this machine's own Python (its torch is the CUDA build the card needs; an environment
built by uv needs the network, which the GPU machine does not have) and holds the pack's own
networks, moved onto the card with ``.to()`` (``own.py``) and never registered.

Steps (each records the device's NVML truth by UUID, NVML's per-process figures for this
process and the worker, the worker's own report and floor, the stand-ins' loaded bytes and
upstream's list):

1. the worker starts, imports ComfyUI core, creates its CUDA context: its floor;
2. the pack moves two networks to the card (8 GiB fp32, 4 GiB fp16);
3. ballast: this process takes the card down to 16 GiB free (as another program would), so
   that upstream's own arithmetic has to choose;
4. ComfyUI loads a 16 GiB model of its own through upstream's ``load_models_gpu``: its
   ``free_memory`` evicts the worker's networks as far as its need (1.1 x weights + 0.8 GiB +
   the reserve) says;
5. the pack runs its second network again, as loaded once: the worker asks the host for room
   for what upstream evicted of it, the host makes it (on the H200, from the other network,
   the idle stand-in, before ComfyUI's model: docs/memory.md), and the network is whole on
   the card again;
6. ``free_memory`` asked for everything (``unload_all_models``): the worker keeps its floor.

The host's model is patcher-shaped (the surface upstream calls: ``partially_load``,
``partially_unload``, ``detach``) over real CUDA tensors, not a ``ModelPatcher``: upstream's
``model_patcher`` imports ``comfy_kitchen``, a 45 MB wheel that does not fit the GPU machine's
transfer limit. Nothing is asserted: the run records, docs/memory.md ("On a real card") reads.

    COMFYUI_DIR=... python bench/gpu/card_scenario.py OUT.json
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MIB, GIB = 1 << 20, 1 << 30
COMFYUI = os.environ["COMFYUI_DIR"]
sys.path.insert(0, COMFYUI)

import comfy.cli_args  # noqa: E402, F401  (upstream's flags: the defaults)
import comfy.model_management as mm  # noqa: E402
import folder_paths  # noqa: E402, F401  (the worker mirrors the host's folders)
import torch  # noqa: E402

from comfy_airlock import device  # noqa: E402
from comfy_airlock.host.memory import heartbeat  # noqa: E402
from comfy_airlock.host.memory.ledger import LEDGER  # noqa: E402
from comfy_airlock.host.pack import IsolatedPack  # noqa: E402

CUDA = torch.device("cuda", 0)
PACK = "memory-pack"


class HostModel:
    """ComfyUI's own model: ``parts`` real tensors, on the CPU until upstream loads them."""

    def __init__(self, name: str, nbytes: int, parts: int) -> None:
        self.name = name
        per = nbytes // parts // 2
        self.parts = [torch.ones(per, dtype=torch.float16) for _ in range(parts)]
        self.model = type("Real", (), {"name": name})()
        self.load_device, self.offload_device, self.parent = CUDA, torch.device("cpu"), None
        self.clone_base_uuid = name

    def _size(self, p) -> int:
        return p.numel() * p.element_size()

    def model_size(self) -> int:
        return sum(self._size(p) for p in self.parts)

    def loaded_size(self) -> int:
        return sum(self._size(p) for p in self.parts if p.device.type == "cuda")

    def current_loaded_device(self):
        return self.load_device if self.loaded_size() else self.offload_device

    def model_patches_to(self, d) -> None:
        pass

    def model_dtype(self):
        return torch.float16

    def partially_load(self, d, extra, force_patch_weights=False) -> int:
        loaded = 0
        for i, p in enumerate(self.parts):
            if p.device.type != "cuda" and loaded + self._size(p) <= extra:
                self.parts[i] = p.to(CUDA)
                loaded += self._size(p)
        torch.cuda.synchronize()
        return loaded

    def partially_unload(self, d, n, force_patch_weights=False) -> int:
        freed = 0
        for i, p in enumerate(self.parts):
            if freed >= n:
                break
            if p.device.type == "cuda":
                self.parts[i] = p.to("cpu")
                freed += self._size(p)
        torch.cuda.empty_cache()
        return freed

    def detach(self, unpatch_all=True) -> None:
        if unpatch_all:
            self.partially_unload(None, self.model_size())

    def is_dynamic(self) -> bool:
        return False

    def is_clone(self, other) -> bool:
        return getattr(other, "model", None) is self.model

    def model_patches_models(self) -> list:
        return []

    def get_nested_additional_models(self) -> list:
        return []

    def lowvram_patch_counter(self) -> int:
        return 0


def nvml_procs(uuid: str) -> dict[int, int]:
    """NVML's per-process device memory (pid -> bytes); empty where it lists none."""
    try:
        devices = device.nvml_devices() or []
    except Exception:
        return {}
    for d in devices:
        if d.get("uuid") == uuid:
            return {int(p["pid"]): int(p["used"] or 0) for p in d.get("processes") or ()}
    return {}


class Recorder:
    def __init__(self, pack: IsolatedPack, uuid: str) -> None:
        self.pack, self.uuid, self.steps = pack, uuid, []

    def step(self, label: str, seconds: float | None = None, **extra) -> None:
        heartbeat.sync()
        row: dict = {"step": label, "seconds": seconds, **extra}
        try:
            mem = device.nvml_memory(self.uuid)
            row["device_used_mib"] = round(mem["used"] / MIB, 1)
            row["device_free_mib"] = round(mem["free"] / MIB, 1)
        except Exception as e:
            row["device_error"] = repr(e)
        procs = nvml_procs(self.uuid)
        wpid = self.pack.worker().pid
        row["nvml_host_mib"] = round(procs[os.getpid()] / MIB, 1) if os.getpid() in procs else None
        row["nvml_worker_mib"] = round(procs[wpid] / MIB, 1) if wpid in procs else None
        row["nvml_pids"] = sorted(procs)
        row["host_torch_reserved_mib"] = round(torch.cuda.memory_reserved() / MIB, 1)
        try:
            report = self.pack.call(f"{PACK}:report")
            row["worker_floor_mib"] = (
                None if report.get("floor") is None else round(report["floor"] / MIB, 1)
            )
            row["worker_models"] = {
                f"{m['name']}#{m['id']}": round(m["resident"] / MIB, 1)
                for m in report.get("models", [])
            }
            row["worker_torch_reserved_mib"] = round(
                self.pack.call("torch.cuda:memory_reserved") / MIB, 1
            )
        except Exception as e:
            row["worker_error"] = repr(e)
        row["standins_mib"] = {
            f"{s.model.name}#{s.model.model_id}": round(s.loaded_size() / MIB, 1)
            for s in LEDGER.standins(self.pack.name)
            if not s.gone
        }
        row["upstream_list"] = [
            [getattr(lm.model.model, "name", type(lm.model).__name__), lm.model_loaded_memory()]
            for lm in mm.current_loaded_models
            if lm.model is not None
        ]
        self.steps.append(row)
        print(json.dumps(row), flush=True)


def run(out: dict) -> None:
    out["vram_state"] = mm.vram_state.name
    out["extra_reserved_vram_mib"] = round(mm.EXTRA_RESERVED_VRAM / MIB, 1)
    uuid = device.cuda_uuid(0)
    out["uuid"] = uuid
    info = {
        "python": sys.executable,
        "env_dir": sys.prefix,
        "key": "gpu-machine-python",
        "comfy": True,
    }
    pack = IsolatedPack.from_env(PACK, str(ROOT / "tests/packs" / PACK), info, COMFYUI)
    rec = Recorder(pack, uuid)
    out["steps"] = rec.steps
    try:
        t0 = time.perf_counter()
        pack.scan()
        out["worker_start_and_scan_s"] = round(time.perf_counter() - t0, 3)
        t0 = time.perf_counter()
        pack.call("torch.cuda:mem_get_info")  # creates the worker's CUDA context
        rec.step("worker has a CUDA context", time.perf_counter() - t0)

        t0 = time.perf_counter()
        pack.call(f"{PACK}:own.make", "A", 8192, "to")
        rec.step("pack moved A (8 GiB fp32) to the card", time.perf_counter() - t0)
        t0 = time.perf_counter()
        pack.call(f"{PACK}:own.make", "B", 8192, "half_to")
        rec.step("pack moved B (4 GiB fp16) to the card", time.perf_counter() - t0)

        free = torch.cuda.mem_get_info()[0]
        ballast = torch.empty(max(0, free - 16 * GIB), dtype=torch.uint8, device=CUDA)
        rec.step("ballast: the card down to 16 GiB free", ballast_mib=ballast.numel() / MIB)

        host = HostModel("H", 16 * GIB, 32)
        t0 = time.perf_counter()
        mm.load_models_gpu([host])
        rec.step("ComfyUI loaded H (16 GiB) through load_models_gpu", time.perf_counter() - t0)

        t0 = time.perf_counter()
        ran = pack.call(f"{PACK}:own.run_on_device", "B")
        rec.step("the pack ran B again", time.perf_counter() - t0, result=ran)
        out["asked"] = pack.call(f"{PACK}:asked")

        t0 = time.perf_counter()
        mm.unload_all_models()
        rec.step("unload_all_models", time.perf_counter() - t0)
        del ballast
    finally:
        pack.close()


def main(path: str) -> int:
    out: dict = {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        run(out)
        out["status"] = "ok"
    except Exception as e:
        out["status"] = f"failed: {type(e).__name__}: {e}"
        out["traceback"] = traceback.format_exc()[-4000:]
        print(out["traceback"], file=sys.stderr, flush=True)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(out, indent=1) + "\n")
    return 0 if out["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "bench/out/gpu/card.json")))

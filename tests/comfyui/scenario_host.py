"""The host side of the memory scenarios (bridge_scenarios.py, wddm_scenarios.py): the REAL
upstream ``comfy.model_management`` (ComfyUI 0.30.0, ``--cpu``) in this process, a simulated
card standing for ``cuda:0``, real workers of tests/packs/memory-pack, and host-local models.

Imported by a scenario script run as ``python <script> ...`` (one fresh process per scenario:
upstream's ledger is module state). The only test hook is the host's free-memory reading for the
fake ``cuda:0``: what this process reads on the card (``free_seen_by(os.getpid())``), the
device's free memory on device-wide semantics and this process's blind budget on WDDM, as
``torch.cuda.mem_get_info`` would answer on each platform. The product never patches the host.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
GIB = 1024 * MIB

sys.path.insert(0, os.environ["COMFYUI_DIR"])
import comfy.cli_args  # noqa: E402
import torch  # noqa: E402

from comfy_airlock.device import SIM_GPU_ENV, SimGpu  # noqa: E402

CARD: list[SimGpu] = []  # the card the host reads (a scenario may swap in another)
# ``cpu`` (the default): upstream under --cpu, its VRAM state DISABLED, the host's reading of
# the fake cuda:0 hooked. ``normal`` / ``low`` (``--lowvram``) / ``no`` (``--novram``): upstream
# believes it runs on a GPU, in that VRAM state, and reads the simulated card through torch's
# own CUDA queries,
# which this test host answers (vram_host.py: the GPU edge, never in the product).
VRAM = os.environ.get("SCENARIO_VRAM", "cpu")
if VRAM == "cpu":
    comfy.cli_args.args.cpu = True
else:
    from vram_host import fake_cuda

    fake_cuda(torch, CARD)
    comfy.cli_args.args.lowvram = VRAM == "low"
    comfy.cli_args.args.novram = VRAM == "no"
# Upstream's memory flags, set before it reads them at import (the workers mirror them):
# ``SCENARIO_RESERVE_GIB`` is ``--reserve-vram``, ``SCENARIO_SMART=off`` ``--disable-smart-memory``.
if os.environ.get("SCENARIO_RESERVE_GIB"):
    comfy.cli_args.args.reserve_vram = float(os.environ["SCENARIO_RESERVE_GIB"])
comfy.cli_args.args.disable_smart_memory = os.environ.get("SCENARIO_SMART") == "off"
import comfy.model_management as mm  # noqa: E402
import folder_paths  # noqa: E402, F401  (the worker mirrors the host's folders)

if VRAM != "cpu":
    # The workers mirror the host's flags: they run --cpu (their torch has no CUDA here), and
    # their models book residency on the simulated card as before.
    comfy.cli_args.args.cpu = True

CUDA = torch.device("cuda", 0)
TMP = Path(tempfile.mkdtemp(prefix="airlock-scenario-"))
# Removed last at exit (atexit runs in reverse): after the loader's own exit handler has
# stopped the workers that map the cards in it.
atexit.register(shutil.rmtree, TMP, True)
os.environ.setdefault("AIRLOCK_HEARTBEAT_S", "0.2")

_host_free = mm.get_free_memory


def _free(dev=None, torch_free_too=False):
    """Test hook: the host's free memory on the fake cuda:0 is what it reads on the card."""
    if dev is not None and getattr(dev, "type", None) == "cuda":
        free = CARD[0].free_seen_by(os.getpid())
        return (free, 0) if torch_free_too else free
    return _host_free(dev, torch_free_too)


if VRAM == "cpu":
    mm.get_free_memory = _free


def new_card(
    name: str, total: int, semantics: str = "device_wide", host_reads: bool = True
) -> SimGpu:
    """A fresh card that the host reads and that workers started from now on book on. The
    host's settings and device truth are read once per process (comfy_airlock.settings,
    comfy_airlock.card): a card made after the host first read them is not the host's, which
    raises unless ``host_reads`` is False (only host-local models use it)."""
    from comfy_airlock import card as device_truth
    from comfy_airlock import settings

    card = SimGpu.create(str(TMP / name), total, name, semantics=semantics)
    CARD[:] = [card]
    os.environ[SIM_GPU_ENV] = card.path
    for read, what in ((settings._SETTINGS, "settings"), (device_truth._TRUTH, "device truth")):
        if host_reads and read and card.path not in settings.get().sim_gpu:
            raise RuntimeError(f"the host's {what} were read before the card {name!r} was made")
    return card


from comfy_airlock.host import loader  # noqa: E402


class Decisions(logging.Handler):
    """The host's memory decisions as it logs them (``comfy_airlock.memory``): each admission's
    answer (``airlock_admission``) and each idle release (``airlock_release``), newest last."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.admissions: list[dict] = []
        self.released: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        admission = getattr(record, "airlock_admission", None)
        if admission is not None:
            self.admissions.append(admission)
        release = getattr(record, "airlock_release", None)
        if release is not None:
            self.released.append(release)


DECISIONS = Decisions()
logging.getLogger("comfy_airlock.memory").setLevel(logging.DEBUG)
logging.getLogger("comfy_airlock.memory").addHandler(DECISIONS)

PACK_DIR = REPO / "tests" / "packs" / "memory-pack"


def load_pack(name: str = "memory-pack"):
    """The memory pack, under ``name`` (several names: several workers of the same code)."""
    mappings, _ = loader.load_pack(str(PACK_DIR), name)
    assert "MemoryPackNode" in mappings, loader.status()
    return loader._PACKS[name]


_LOADED_IN = set()  # (pack, worker generation) that imported the pack (the scan cache may skip it)


def call(pack, fn, *args):
    w = pack.worker()
    if (pack.name, w.generation) not in _LOADED_IN or not w.alive:
        pack.scan()
        _LOADED_IN.add((pack.name, pack.worker().generation))
    return pack.call(f"memory-pack:{fn}", *args)


def ledger():
    """Names in upstream's order (index 0 first) of the models in the ledger."""
    return [lm.model.model.name for lm in mm.current_loaded_models if lm.model is not None]


def names(unloaded):
    return [lm.model.model.name if lm.model is not None else None for lm in unloaded]


def close_all():
    for p in list(loader._PACKS.values()):
        p.close()


# --- host-local models: what ComfyUI alone holds --------------------------------------------


class LocalModel:
    """A model held by the host itself, with the patcher surface upstream uses, booked on the
    simulated card the way a ModelPatcher's weights occupy VRAM: resident parts are booked."""

    def __init__(self, card, name, parts):
        self.card, self.name = card, name
        self.parts = list(parts)  # [bytes, resident?]
        self.model = type("Real", (), {"name": name})()
        self.load_device, self.offload_device, self.parent = CUDA, torch.device("cpu"), None
        self.clone_base_uuid = name
        self._book()

    def _book(self):
        self.card.book(os.getpid(), self.name, self.loaded_size())

    def model_size(self):
        return sum(b for b, _ in self.parts)

    def loaded_size(self):
        return sum(b for b, r in self.parts if r)

    def current_loaded_device(self):
        return self.load_device if self.loaded_size() else self.offload_device

    def model_patches_to(self, d):
        pass

    def model_dtype(self):
        return None

    def partially_load(self, d, extra, force_patch_weights=False):
        return 0  # registered as it is (insert_local); wddm_scenarios.HostModel loads

    def partially_unload(self, d, n, force_patch_weights=False):
        freed = 0
        for p in self.parts:
            if freed >= n:
                break
            if p[1]:
                p[1] = False
                freed += p[0]
        self._book()
        return freed

    def detach(self, unpatch_all=True):
        if unpatch_all:
            for p in self.parts:
                p[1] = False
            self._book()

    def is_dynamic(self):
        return False

    def is_clone(self, other):
        return getattr(other, "model", None) is self.model

    def model_patches_models(self):
        return []

    def get_nested_additional_models(self):
        return []


REF_KEEP = []  # upstream holds patchers weakly; the host's nodes hold them strongly


def insert_local(lm_model):
    """Registers a resident host model as upstream does after a load."""
    REF_KEEP.append(lm_model)
    lm = mm.LoadedModel(lm_model)
    lm.model_load()
    mm.current_loaded_models.insert(0, lm)

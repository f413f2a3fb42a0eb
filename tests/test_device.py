"""The simulated GPU shared by real processes (device-wide and WDDM semantics), the NVML reader
over the fake ``libnvidia-ml.so.1`` (``crates/airlock-fake-nvml``) reporting it, device
resolution by UUID, and cgroup-aware host RAM.

The fake library comes from ``cargo build -p airlock-fake-nvml`` (a no-op after ``cargo test
--workspace``); :func:`conftest.fake_nvml_library` asks cargo for the artifact's path, so a custom
``CARGO_TARGET_DIR`` works too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from comfy_airlock import device
from comfy_airlock.device import (
    DeviceError,
    DeviceMismatch,
    DeviceTruth,
    Nvml,
    SimGpu,
    SimOutOfMemory,
)

GIB = 1 << 30
MIB = 1 << 20


@pytest.fixture
def card(tmp_path: Path) -> SimGpu:
    return SimGpu.create(
        tmp_path / "gpu", 16 * GIB, name="NVIDIA Simulated", semantics="device_wide"
    )


# A worker stand-in: books on the card named by AIRLOCK_SIM_GPU under its own pid, churning a
# key of the parent's pid shared by every child, then holds until told on stdin.
BOOKER = textwrap.dedent(
    """
    import os, sys
    from comfy_airlock.device import SimGpu
    card = SimGpu.from_env()
    me, parent, n = os.getpid(), os.getppid(), int(sys.argv[1])
    for r in range(500):
        card.book(me, f"m{r % 3}", r + 1)
        card.add(me, "ctx", 1)
        card.book(parent, "shared", r % 4)
    card.release(me, "ctx")
    card.book(parent, "shared", 7)
    card.book(me, "model", n * (1 << 30))
    card.book(me, "ctx", 300 * (1 << 20))
    for r in range(3):
        card.release(me, f"m{r}")
    print("ready", flush=True)
    if sys.stdin.readline().strip() == "release":
        card.release_process(me)
    """
)


def start_booker(card: SimGpu, n: int) -> subprocess.Popen[str]:
    env = {**os.environ, device.SIM_GPU_ENV: card.path}
    return subprocess.Popen(
        [sys.executable, "-c", BOOKER, str(n)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_env_names():
    assert device.SIM_GPU_ENV == "AIRLOCK_SIM_GPU"
    assert device.NVML_LIBRARY_ENV == "AIRLOCK_NVML_LIBRARY"


def test_a_card_books_sets_adds_and_releases(card: SimGpu, tmp_path: Path):
    assert card.name == "NVIDIA Simulated"
    assert card.uuid.startswith("GPU-") and len(card.uuid) == 40
    assert card.semantics == "device_wide"
    assert (card.total, card.used(), card.free()) == (16 * GIB, 0, 16 * GIB)
    assert card.book(10, "model", 4 * GIB) == 0
    assert card.book(10, "model", 4 * GIB) == 4 * GIB  # set: idempotent
    assert card.add(10, "model", -GIB) == 3 * GIB
    assert card.add(11, "ctx", 500 * MIB) == 500 * MIB
    assert card.used_by(10) == 3 * GIB
    assert card.free() == card.free_seen_by(10) == 16 * GIB - 3 * GIB - 500 * MIB
    assert sorted(card.bookings()) == [(10, "model", 3 * GIB), (11, "ctx", 500 * MIB)]
    assert card.processes() == [(10, 3 * GIB), (11, 500 * MIB)]
    assert card.release(10, "model") == 3 * GIB
    assert card.release_process(11) == 500 * MIB
    assert card.used() == 0 and card.slots_in_use() == 0
    again = SimGpu.open(tmp_path / "gpu")
    assert again.uuid == card.uuid
    fixed = SimGpu.create(tmp_path / "fixed", GIB, uuid="GPU-00000000-0000-4000-8000-000000000001")
    assert fixed.uuid == "GPU-00000000-0000-4000-8000-000000000001"


def test_errors_are_typed(card: SimGpu, tmp_path: Path):
    card.book(1, "a", 15 * GIB)
    with pytest.raises(SimOutOfMemory) as info:
        card.book_checked(2, "b", 2 * GIB)
    e = info.value
    assert (e.pid, e.tag, e.requested, e.free) == (2, "b", 2 * GIB, GIB)
    assert isinstance(e, DeviceError)
    assert card.used_by(2) == 0
    with pytest.raises(DeviceError, match="cannot add"):
        card.add(1, "a", -16 * GIB)
    with pytest.raises(DeviceError, match="tag of 97 bytes"):
        card.book(1, "x" * 97, 1)
    with pytest.raises(DeviceError, match="exists"):
        SimGpu.create(card.path, GIB)
    with pytest.raises(DeviceError, match="No such file"):
        SimGpu.open(tmp_path / "missing")
    (tmp_path / "junk").write_bytes(b"\0" * 4096)
    with pytest.raises(DeviceError, match="not a simulated GPU"):
        SimGpu.open(tmp_path / "junk")
    with pytest.raises(OverflowError):
        card.book(-1, "a", 1)


def test_from_env(card: SimGpu, monkeypatch):
    monkeypatch.delenv(device.SIM_GPU_ENV, raising=False)
    assert SimGpu.from_env() is None
    monkeypatch.setenv(device.SIM_GPU_ENV, card.path)
    assert SimGpu.from_env().uuid == card.uuid


def test_two_processes_book_on_one_card(card: SimGpu):
    workers = [start_booker(card, n) for n in (2, 3)]
    try:
        for w in workers:
            assert w.stdout.readline().strip() == "ready"
        pids = [w.pid for w in workers]
        # Each worker's own bookings, the key they all churned once, and nothing else.
        assert card.used_by(pids[0]) == 2 * GIB + 300 * MIB
        assert card.used_by(pids[1]) == 3 * GIB + 300 * MIB
        shared = [b for b in card.bookings() if b[0] == os.getpid()]
        assert shared == [(os.getpid(), "shared", 7)]
        used = 5 * GIB + 600 * MIB + 7
        assert card.used() == used
        # What the host's get_free_memory for a fake cuda:0 reads, in tests.
        assert card.free_seen_by(os.getpid()) == 16 * GIB - used
        assert card.reap() == []  # both alive
        # One releases before exiting, the other just exits: reaping drops what it held.
        workers[0].communicate("release\n", timeout=30)
        workers[1].communicate("exit\n", timeout=30)
        assert card.used() == 3 * GIB + 300 * MIB + 7
        assert card.reap() == [pids[1]]
        card.release_process(os.getpid())
        assert card.used() == 0 and card.slots_in_use() == 0
    finally:
        for w in workers:
            w.kill()
            w.wait()


def test_nvml_over_the_fake_library_reports_the_card(card: SimGpu, fake_nvml: Path, monkeypatch):
    workers = [start_booker(card, n) for n in (1, 2)]
    try:
        for w in workers:
            assert w.stdout.readline().strip() == "ready"
        monkeypatch.setenv(device.SIM_GPU_ENV, card.path)
        devs = device.nvml_devices(fake_nvml)
        assert devs is not None and len(devs) == 1
        d = devs[0]
        assert (d["uuid"], d["name"]) == (card.uuid, card.name)
        assert (d["total"], d["used"], d["free"]) == (card.total, card.used(), card.free())
        assert d["used"] == 3 * GIB + 600 * MIB + 7
        procs = {p["pid"]: p["used"] for p in d["processes"]}
        assert procs == dict(card.processes())
        assert procs[workers[0].pid] == GIB + 300 * MIB
        # By UUID, in torch's spelling too; an unknown UUID is None.
        bare = card.uuid.removeprefix("GPU-")
        mem = device.nvml_memory(bare, fake_nvml)
        assert mem == {
            "uuid": card.uuid,
            "total": card.total,
            "free": card.free(),
            "used": card.used(),
        }
        assert device.nvml_memory("GPU-ffffffff-0000-0000-0000-000000000000", fake_nvml) is None
        # A kept handle follows the card live.
        nvml = Nvml.open(fake_nvml)
        assert nvml is not None and nvml.library == str(fake_nvml)
        before = nvml.memory(card.uuid)["free"]
        workers[0].communicate("release\n", timeout=30)
        assert nvml.memory(card.uuid)["free"] == before + GIB + 300 * MIB
        del nvml
    finally:
        for w in workers:
            w.kill()
            w.wait()
        card.release_process(os.getpid())


def test_a_process_pointed_at_the_fake_reads_it_by_env(card: SimGpu, fake_nvml: Path):
    """What a host (or ComfyUI) process started by a test sees: only environment variables."""
    card.book(os.getpid(), "host-model", 5 * GIB)
    env = {
        **os.environ,
        device.SIM_GPU_ENV: card.path,
        device.NVML_LIBRARY_ENV: str(fake_nvml),
    }
    code = "import json; from comfy_airlock import device; print(json.dumps(device.nvml_devices()))"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    (d,) = json.loads(out.stdout)
    assert d["uuid"] == card.uuid
    assert d["free"] == 11 * GIB
    assert d["processes"] == [{"pid": os.getpid(), "used": 5 * GIB}]
    card.release_process(os.getpid())


def test_without_nvml_every_reader_degrades_to_none(fake_nvml: Path, monkeypatch):
    missing = "/nonexistent/libnvidia-ml.so.1"
    assert device.nvml_devices(missing) is None
    assert device.nvml_memory("GPU-0", missing) is None
    assert Nvml.open(missing) is None
    # The library loads but no driver answers (the fake without a card).
    monkeypatch.delenv(device.SIM_GPU_ENV, raising=False)
    assert device.nvml_devices(fake_nvml) is None
    assert Nvml.open(fake_nvml) is None


def test_cuda_uuid_without_cuda_is_none():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        assert device.cuda_uuid(0).startswith(("GPU-", "MIG-"))
    else:
        assert device.cuda_uuid(0) is None


# --- WDDM semantics ---------------------------------------------------------------------------

# A worker: books 12 GiB on the card named by AIRLOCK_SIM_GPU under its own pid, says so, and
# holds it until its stdin closes; exits without releasing.
HOLDER = textwrap.dedent(
    """
    import os, sys
    from comfy_airlock.device import SimGpu
    SimGpu.from_env().book(os.getpid(), "model", 12 * (1 << 30))
    print("ready", flush=True)
    sys.stdin.readline()
    """
)


def start_holder(card: SimGpu) -> subprocess.Popen[str]:
    env = {**os.environ, device.SIM_GPU_ENV: card.path}
    w = subprocess.Popen(
        [sys.executable, "-c", HOLDER],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert w.stdout.readline().strip() == "ready"
    return w


def test_semantics_are_chosen_at_creation_or_by_env(tmp_path: Path, monkeypatch):
    assert device.SIM_SEMANTICS_ENV == "AIRLOCK_SIM_SEMANTICS"
    monkeypatch.delenv(device.SIM_SEMANTICS_ENV, raising=False)
    plain = SimGpu.create(tmp_path / "plain", GIB)
    assert (plain.semantics, plain.wddm) == ("device_wide", None)
    wddm = SimGpu.create(tmp_path / "wddm", GIB, semantics="wddm")
    assert wddm.semantics == "wddm"
    # The seed's figures, MB read as MiB.
    assert wddm.wddm == {
        "pinned_bias": -583 * MIB,
        "repartition_bias": 533 * MIB,
        "repartition_below": 0,
    }
    monkeypatch.setenv(device.SIM_SEMANTICS_ENV, "wddm:pinned_bias=-1MiB,repartition_below=1GiB")
    tuned = SimGpu.create(tmp_path / "tuned", GIB)
    assert tuned.wddm == {
        "pinned_bias": -MIB,
        "repartition_bias": 533 * MIB,
        "repartition_below": GIB,
    }
    # Another process opening the card gets its semantics from the file, not its environment.
    monkeypatch.delenv(device.SIM_SEMANTICS_ENV)
    assert SimGpu.open(tuned.path).semantics_spec == tuned.semantics_spec
    again = SimGpu.create(tmp_path / "again", GIB, semantics=tuned.semantics_spec)
    assert again.wddm == tuned.wddm
    with pytest.raises(DeviceError, match="unknown parameter"):
        SimGpu.create(tmp_path / "bad", GIB, semantics="wddm:colour=blue")
    monkeypatch.setenv(device.SIM_SEMANTICS_ENV, "linux")
    with pytest.raises(DeviceError, match="expected device_wide or wddm"):
        SimGpu.create(tmp_path / "bad", GIB)


def test_a_wddm_reading_is_its_own_budget(tmp_path: Path):
    card = SimGpu.create(tmp_path / "gpu", 16 * GIB, semantics="wddm")
    assert card.attach(1) and not card.attach(1)
    assert card.free_seen_by(1) == 16 * GIB - 583 * MIB  # pinned at its start
    card.book(1, "m", GIB)
    assert card.free_seen_by(1) == card.free() - 583 * MIB  # 1:1 with its own
    card.book(2, "m", 8 * GIB)  # starts: 1 re-partitions first, then 2 grows unseen
    assert card.free_seen_by(1) == 15 * GIB + 533 * MIB
    assert card.free() == 7 * GIB
    assert card.mem_get_info(2) == (7 * GIB - 583 * MIB, 16 * GIB)
    n = card.repartitions()
    card.repartition()
    assert card.repartitions() == n + 1
    assert card.free_seen_by(1) == 7 * GIB + 533 * MIB
    views = card.process_views()
    assert [(v["pid"], v["used"], v["repartitioned"]) for v in views] == [
        (1, GIB, True),
        (2, 8 * GIB, True),
    ]
    assert card.release_process(2) == 8 * GIB  # an exit re-partitions
    assert card.free_seen_by(1) == 15 * GIB + 533 * MIB
    assert card.processes_attached() == 1
    card.release_process(1)
    assert (card.processes_attached(), card.slots_in_use()) == (0, 0)


@pytest.mark.parametrize("semantics", ["wddm", "device_wide"])
def test_the_seeds_headline_scenario_without_a_bridge(
    tmp_path: Path, fake_nvml: Path, monkeypatch, semantics: str
):
    """A worker process holds 12 GiB of a 16 GiB card; the host (this process) loads 6 GiB when
    its own reading says they fit, as upstream's load_models_gpu decides. On WDDM the reading is
    blind to the worker: the host over-admits and the worker is demoted. Device-wide it reads
    the truth and does not load."""
    card = SimGpu.create(tmp_path / "gpu", 16 * GIB, semantics=semantics)
    host = os.getpid()
    card.attach(host)  # the host's CUDA context exists first
    worker = start_holder(card)
    try:
        assert card.free() == 4 * GIB
        seen = card.free_seen_by(host)
        loads = seen >= 6 * GIB
        if loads:
            card.book_checked(host, "model", 6 * GIB)
        hit = card.demotions(worker.pid)
        monkeypatch.setenv(device.SIM_GPU_ENV, card.path)
        (nvml,) = device.nvml_devices(fake_nvml)
        if semantics == "wddm":
            assert seen == 16 * GIB  # about 16 GiB less its own (nothing)
            assert loads and card.overcommitted() == 2 * GIB
            assert hit["count"] > 0
            assert hit == {"count": 1, "bytes": 2 * GIB}
            assert card.demotions(host) == {"count": 0, "bytes": 0}
            # NVML tells the truth, and under WDDM accounts no process's memory.
            assert (nvml["used"], nvml["free"]) == (16 * GIB, 0)
            assert {p["used"] for p in nvml["processes"]} == {None}
        else:
            assert seen == card.free() == 4 * GIB
            assert not loads and card.overcommitted() == 0
            assert hit == card.demotions_total() == {"count": 0, "bytes": 0}
            assert (nvml["used"], nvml["free"]) == (12 * GIB, 4 * GIB)
        worker.communicate("exit\n", timeout=30)
        assert card.reap() == [worker.pid]
        # The worker's exit re-partitioned the host on WDDM: its reading is honest again.
        assert card.free_seen_by(host) == card.free() + (533 * MIB if semantics == "wddm" else 0)
    finally:
        worker.kill()
        worker.wait()
        card.release_process(host)


# --- device truth and host RAM ----------------------------------------------------------------


def test_resolve_device_names_the_pack_on_another_card():
    a = "GPU-5a1c0b2e-0000-4000-8000-00000000000a"
    b = "GPU-5a1c0b2e-0000-4000-8000-00000000000b"
    bare = a.removeprefix("GPU-")
    assert device.resolve_device(bare, {"pack-a": a, "pack-b": bare}) == a
    assert device.resolve_device(a) == a
    with pytest.raises(DeviceMismatch) as info:
        device.resolve_device(a, [("pack-a", a), ("pack-b", b)])
    e = info.value
    assert (e.pack, e.host_uuid, e.worker_uuid) == ("pack-b", a, b)
    assert isinstance(e, DeviceError) and "pack-b" in str(e)


def test_device_truth_reads_nvml_by_uuid(tmp_path: Path, fake_nvml: Path, monkeypatch):
    card = SimGpu.create(tmp_path / "gpu", 16 * GIB, semantics="wddm")
    card.attach(os.getpid())
    monkeypatch.setenv(device.SIM_GPU_ENV, card.path)
    truth = DeviceTruth.open(card.uuid.removeprefix("GPU-"), fake_nvml)
    assert truth.available and truth.uuid == card.uuid
    card.book(4242, "model", 12 * GIB)
    # The truth, where this process's own reading is blind.
    assert truth.memory() == {
        "uuid": card.uuid,
        "total": 16 * GIB,
        "free": 4 * GIB,
        "used": 12 * GIB,
    }
    assert card.free_seen_by(os.getpid()) == 16 * GIB
    with pytest.raises(DeviceError, match="no device with UUID"):
        DeviceTruth.open("GPU-ffffffff-0000-0000-0000-000000000000", fake_nvml)
    # No driver: the truth reads None, and callers use upstream's semantics.
    absent = DeviceTruth.open(card.uuid, "/nonexistent/libnvidia-ml.so.1")
    assert not absent.available and absent.memory() is None
    card.release_process(4242)
    card.release_process(os.getpid())


def test_host_ram_on_this_machine():
    ram = device.host_ram()
    meminfo = dict(
        line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line
    )
    mem_total = int(meminfo["MemTotal"].split()[0]) * 1024
    assert ram["source"] in ("cgroup_v2", "cgroup_v1", "machine")
    assert 0 < ram["total"] <= mem_total
    assert 0 <= ram["used"] <= ram["total"] and 0 < ram["available"] <= ram["total"]
    if ram["source"] == "machine":
        assert ram["total"] == mem_total and ram["cgroup"] is None
    else:
        assert Path(ram["cgroup"]).is_dir()

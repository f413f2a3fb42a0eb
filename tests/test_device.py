"""The simulated GPU shared by real processes, and the NVML reader over the fake
``libnvidia-ml.so.1`` (``crates/airlock-fake-nvml``) reporting it.

The fake library comes from ``cargo build -p airlock-fake-nvml`` (a no-op after ``cargo test
--workspace``); :func:`fake_nvml_library` asks cargo for the artifact's path, so a custom
``CARGO_TARGET_DIR`` works too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT, missing

from comfy_airlock import device
from comfy_airlock.device import DeviceError, Nvml, SimGpu, SimOutOfMemory

GIB = 1 << 30
MIB = 1 << 20


def fake_nvml_library() -> Path | None:
    """Builds the fake NVML (if needed) and returns ``libairlock_fake_nvml.so``'s path."""
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    if not os.path.exists(cargo):
        return None
    out = subprocess.run(
        [cargo, "build", "-q", "-p", "airlock-fake-nvml", "--message-format=json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == (
            "airlock_fake_nvml"
        ):
            for f in msg["filenames"]:
                if f.endswith(".so"):
                    return Path(f)
    return None


@pytest.fixture(scope="session")
def fake_nvml() -> Path:
    lib = fake_nvml_library()
    if lib is None:
        missing("cargo is missing: the fake NVML cannot be built")
    return lib


@pytest.fixture
def card(tmp_path: Path) -> SimGpu:
    return SimGpu.create(tmp_path / "gpu", 16 * GIB, name="NVIDIA Simulated")


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

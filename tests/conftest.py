"""Shared fixtures: worker interpreters, the test helper modules, leak checks."""

from __future__ import annotations

import gc
import json
import os
import signal
import stat
import sys
import textwrap
from pathlib import Path
from typing import NoReturn

import pytest

# A run started in the background by a non-interactive shell (`make test &`) has SIGINT ignored,
# and an ignored signal stays ignored across exec: every ComfyUI the tests start would ignore
# Ctrl-C, and the Ctrl-C tests would test the shell. Python's own handler makes children start
# with the default disposition again.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ROOT = Path(__file__).resolve().parent.parent
HELPERS = Path(__file__).resolve().parent / "helpers"
sys.path.insert(0, str(HELPERS))

from faults import chaos  # noqa: E402  (after the path it may need)

# One seed for every process of a distributed run (pytest-xdist starts them after this runs,
# with this environment), so the summary's seed is the one each fault test drew from.
os.environ.setdefault("AIRLOCK_FAULT_SEED", str(chaos.SEED))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist: a test process ended; its fault records join this process's summary."""
    runs = getattr(node, "workeroutput", {}).get("fault_runs")
    if runs:
        chaos.add_records(json.loads(runs))


@pytest.fixture(autouse=True)
def _codecs_left_as_found():
    """Every test leaves this process's codecs as it found them (ADR 0043). A test process runs
    test files in an order that changes from run to run, so a codec one test replaced (a
    worker's side imported into this process, which is the host of later tests) would make
    another test fail, a different one each run; this names the test that replaced it.
    Adding a codec is fine (a module that registers its own on import, imported once)."""
    from comfy_airlock import values

    before = {n: c.decode for n, c in values._BY_NAME.items()}
    yield
    after = {n: c.decode for n, c in values._BY_NAME.items()}
    changed = sorted(n for n, d in before.items() if n not in after or after[n] != d)
    assert not changed, (
        f"the test replaced or removed codecs of the pytest process: {changed} "
        "(put them back when it ends: monkeypatch)"
    )


def pytest_terminal_summary(terminalreporter):
    if hasattr(terminalreporter.config, "workeroutput") or not chaos.records():
        return
    terminalreporter.section("fault injection")
    for line in chaos.summary_lines():
        terminalreporter.write_line(line)
    out = os.environ.get("AIRLOCK_FAULT_REPORT")
    if out:
        Path(out).write_text(json.dumps(chaos.summary_json(), indent=2) + "\n")


# Worker interpreters made by scripts/bootstrap.sh: another Python with numpy 1 and no torch,
# and another Python with an older torch than the host's.
ENVS = {
    "host": Path(sys.executable),
    "py310": ROOT / ".envs" / "py310-numpy1" / "bin" / "python",
    "py312": ROOT / ".envs" / "py312-torch" / "bin" / "python",
}


def missing(what: str) -> NoReturn:
    """Something the repo's own setup provides is absent: a failure under CI (where setup ran),
    a skip on a developer's machine that has not run it."""
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI runs `make setup`, which must provide it)")
    pytest.skip(f"{what} (run `make setup`)")


def fake_nvml_library() -> Path | None:
    """Builds the fake NVML (if needed) and returns ``libairlock_fake_nvml.so``'s path: it
    reports the simulated cards named by ``AIRLOCK_SIM_GPU`` (crates/airlock-fake-nvml)."""
    import json
    import shutil
    import subprocess

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


def interpreter(key: str) -> str:
    path = ENVS[key]
    if not path.exists():
        missing(f"worker env {path} is missing: scripts/bootstrap.sh creates it")
    return str(path)


@pytest.fixture
def make_worker():
    """Starts workers and closes them at the end of the test."""
    import comfy_airlock

    made = []

    def make(key: str = "host", **kw):
        kw.setdefault("sys_path", [str(HELPERS)])
        kw.setdefault("name", f"t-{key}")
        w = comfy_airlock.Worker(interpreter(key), **kw)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close(grace=2.0)


@pytest.fixture(scope="module")
def host_worker():
    import comfy_airlock

    w = comfy_airlock.Worker(sys.executable, sys_path=[str(HELPERS)], name="shared")
    yield w
    w.close(grace=2.0)


def memfd_count() -> int:
    """memfds open or mapped in this process (our segments show up as memfd:airlock-*). Every
    idle worker's lane is trimmed first (comfy_airlock/idle_trim.py), so a module's shared
    worker going idle during a test does not move the count."""
    from comfy_airlock import idle_trim

    gc.collect()
    idle_trim.TRIMMER.pass_once(0.0)
    fds = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "memfd:airlock" in os.readlink(f"/proc/self/fd/{fd}"):
                fds += 1
        except OSError:
            pass
    with open("/proc/self/maps") as f:
        maps = {
            line.split()[-2] if line.rstrip().endswith("(deleted)") else line.split()[-1]
            for line in f
            if "memfd:airlock" in line
        }
    return fds + len(maps)


def socket_dirs() -> list[str]:
    import tempfile

    bases = {tempfile.gettempdir(), "/tmp", os.environ.get("XDG_RUNTIME_DIR", "/tmp")}
    pid = os.getpid()
    return [
        os.path.join(b, d)
        for b in bases
        if os.path.isdir(b)
        for d in os.listdir(b)
        if d.startswith(f"airlock-{pid}-")
    ]


def evil_python(tmp_path, body: str) -> str:
    """An 'interpreter' that runs our hostile script instead of the worker runtime."""
    script = tmp_path / "evil.py"
    script.write_text(textwrap.dedent(body))
    wrapper = tmp_path / "evil-python"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)

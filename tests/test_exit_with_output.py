"""A host exits cleanly while the core's threads, or its own threads inside the core, still work.

Each worker's stdout, stderr and log records reach the host's ``logging`` from a thread the
core starts. ComfyUI exiting right after a chatty node used to segfault in that thread (it
attached to a finalizing interpreter): 22 exits of 30 here. Now Python's ``atexit`` shuts the
door first (crates/airlock-py/src/exit_gate.rs) and later lines go to the host's stderr.

A daemon thread that released the GIL inside the core (the heartbeat reading NVML, ComfyUI's
execution thread waiting for a worker) and takes it back while Python finalizes used to crash
the exit every time (ADR 0038); such a thread now never comes back.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

from conftest import HELPERS

HOST = textwrap.dedent(
    """
    import logging, sys
    import comfy_airlock
    logging.basicConfig(level=logging.INFO, filename=sys.argv[1], filemode="w",
                        format="%(message)s")
    w = comfy_airlock.Worker(sys.executable, sys_path=[{helpers!r}], name="chatty")
    w.call("airlock_testpack:chatter", 3000)
    w.close()
    """
)

LINE = re.compile(r"\[chatty(/testpack)?\] (line|record) (\d+)$")


def test_a_host_exiting_while_a_worker_still_prints_does_not_crash(tmp_path):
    script = tmp_path / "host.py"
    script.write_text(HOST.format(helpers=str(HELPERS)))
    for run in range(10):
        log = tmp_path / f"log{run}.txt"
        p = subprocess.run(
            [sys.executable, str(script), str(log)], capture_output=True, text=True, timeout=60
        )
        assert p.returncode == 0, (run, p.returncode, p.stderr[-3000:])
        # Every line arrives once, in order, through logging or (after atexit) on stderr.
        seen = {"line": [], "record": []}
        for text in (log.read_text(), p.stderr):
            for ln in text.splitlines():
                m = LINE.match(ln)
                assert m, (run, ln)
                seen[m.group(2)].append(int(m.group(3)))
        for kind, got in seen.items():
            assert got == list(range(len(got))), (run, kind, got[:20])


# Daemon threads in detached calls of the core, as a host has them: the heartbeat's NVML read
# (the fake NVML reporting a simulated card), a reading of the host's RAM, and a worker call in
# flight. The main thread returns while they run.
BUSY_HOST = textwrap.dedent(
    """
    import os, sys, tempfile, threading, time
    import comfy_airlock
    from comfy_airlock.device import SIM_GPU_ENV, DeviceTruth, SimGpu, host_ram
    card = SimGpu.create(os.path.join(tempfile.mkdtemp(), "card"), 16 << 30, "card")
    os.environ[SIM_GPU_ENV] = card.path
    truth = DeviceTruth.open(card.uuid, sys.argv[1])
    w = comfy_airlock.Worker(sys.executable, sys_path=[{helpers!r}], name="busy")
    w.call("airlock_testpack:echo", 1)

    def forever(f):
        while True:
            f()

    for f in (truth.memory, truth.memory, host_ram,
              lambda: w.call("airlock_testpack:sleep", 0.01)):
        threading.Thread(target=forever, args=(f,), daemon=True).start()
    time.sleep(0.2)
    print("returning")
    """
)


def test_a_host_exiting_while_its_threads_wait_in_the_core_does_not_crash(tmp_path, fake_nvml):
    script = tmp_path / "busy_host.py"
    script.write_text(BUSY_HOST.format(helpers=str(HELPERS)))
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    for run in range(10):
        p = subprocess.run(
            [sys.executable, str(script), str(fake_nvml)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert p.returncode == 0 and p.stdout == "returning\n", (
            run,
            p.returncode,
            p.stderr[-3000:],
        )

"""A host that exits while a worker's output is still being forwarded exits cleanly.

Each worker's stdout, stderr and log records reach the host's ``logging`` from a thread the
core starts. ComfyUI exiting right after a chatty node used to segfault in that thread (it
attached to a finalizing interpreter): 22 exits of 30 here. Now Python's ``atexit`` shuts the
door first (crates/airlock-py/src/exit_gate.rs) and later lines go to the host's stderr.
"""

from __future__ import annotations

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

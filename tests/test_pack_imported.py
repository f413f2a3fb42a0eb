"""When the host knows a worker has imported its pack (``IsolatedPack.imported``): the one
rule behind both bounded calls of ADR 0047, a node's ``call-deadline`` and a route's bound,
each of which waits for a new worker's import apart. Real worker processes."""

from __future__ import annotations

import os
import signal
import sys
import time

from comfy_airlock.host.pack import WARM, IsolatedPack

PACK = """
import os, pathlib
with pathlib.Path({log!r}).open("a") as f:
    f.write(f"{{os.getpid()}}\\n")
NODE_CLASS_MAPPINGS = {{}}
"""


def test_a_worker_has_imported_its_pack_once_a_call_that_imports_returned(tmp_path):
    log = tmp_path / "imports.log"
    d = tmp_path / "imp"
    d.mkdir()
    (d / "__init__.py").write_text(PACK.format(log=str(log)))
    p = IsolatedPack(
        name="imp",
        dir=str(d),
        python=sys.executable,
        env_dir=sys.prefix,
        env_key="test",
        comfy=False,
    )
    try:
        assert not p.imported()  # no worker
        w = p.worker()
        p.call("comfy_airlock.pack_values:held")  # a call that does not import the pack
        assert p.alive() and not p.imported() and not log.exists()
        p.scan()
        assert p.imported() and log.read_text().split() == [str(w.pid)]

        first = w.generation
        os.kill(w.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while p.alive():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert not p.imported()  # the next worker has not
        p.call(WARM)
        assert p.imported() and p.generation() == first + 1
        assert len(log.read_text().split()) == 2
    finally:
        p.close()

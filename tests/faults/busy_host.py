"""A host that keeps its workers busy until it is killed (run by test_host_death.py).

``python busy_host.py SEED``: starts four workers, each doing something different on its own
thread (a long call, tensor transfers both ways, a call whose forked child lingers, and kills
and respawns, so that the host may die in the middle of a handshake), prints ``pid <n>`` for
every worker process it starts and ``ready`` once all are busy, then runs until killed.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "helpers"))

import comfy_airlock  # noqa: E402

_print_lock = threading.Lock()


def say(line: str) -> None:
    with _print_lock:
        print(line, flush=True)


def worker(name: str) -> comfy_airlock.Worker:
    # The whole environment, explicitly: the test finds everything this host started by a
    # marker variable in it.
    w = comfy_airlock.Worker(
        sys.executable,
        sys_path=[str(HERE / "worker_side")],
        env=dict(os.environ),
        name=name,
        connect_timeout=30,
    )
    say(f"pid {w.pid}")
    return w


def long_call(w):
    w.call("fault_targets:nap", 600)


def transfers(w):
    a = np.ones(16 << 20, dtype=np.uint8)
    while True:
        w.call("fault_targets:echo", a)
        w.call("fault_targets:make", 8 << 20, 3)


FORKED = threading.Event()


def lingering_child(w):
    got = w.call("fault_targets:fork", "sleep", 600.0)
    say(f"pid {got['child']}")
    FORKED.set()
    w.call("fault_targets:nap", 600)


def respawns(w, rng):
    while True:
        w.kill()
        time.sleep(rng.uniform(0, 0.05))
        with contextlib.suppress(comfy_airlock.AirlockError):
            w.call("fault_targets:echo", 1)
        if w.pid is not None:
            say(f"pid {w.pid}")


def main() -> None:
    rng = random.Random(int(sys.argv[1]))
    jobs = [long_call, transfers, lingering_child]
    workers = [worker(f"busy-{i}") for i in range(4)]
    for job, w in zip(jobs, workers, strict=False):
        threading.Thread(target=job, args=(w,), daemon=True).start()
    threading.Thread(target=respawns, args=(workers[3], rng), daemon=True).start()
    # Ready once the child exists and its worker is back in a call: a host killed during the
    # fork call itself races the worker's main thread (see docs/reliability.md, known gaps).
    FORKED.wait(60)
    time.sleep(0.3)
    say("ready")
    time.sleep(600)
    os._exit(0)


if __name__ == "__main__":
    main()

"""The core in one minute: a worker on another Python (3.12, an older torch) and one without
torch at all (3.10, numpy 1), tensors crossing through shared memory, errors with their type,
and a crash followed by a respawn.

ComfyUI itself comes with the next issue ("Isolated node packs inside real ComfyUI"); this demo
then becomes the ComfyUI workflow run over HTTP.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

import comfy_airlock

ROOT = Path(__file__).resolve().parent.parent
HELPERS = str(ROOT / "tests" / "helpers")


def main() -> None:
    sys.path.insert(0, HELPERS)
    print(f"host: Python {sys.version.split()[0]}, torch {torch.__version__}")
    py312 = ROOT / ".envs" / "py312-torch" / "bin" / "python"
    py310 = ROOT / ".envs" / "py310-numpy1" / "bin" / "python"
    with (
        comfy_airlock.Worker(py312, sys_path=[HELPERS], name="py312") as a,
        comfy_airlock.Worker(py310, sys_path=[HELPERS], name="py310") as b,
    ):
        for w in (a, b):
            info = w.info()
            print(
                f"worker {w.name}: pid {info['pid']}, Python {info['python']}, "
                f"torch {info['torch']}, numpy {info['numpy']}"
            )

        image = torch.rand(1, 1024, 1024, 3)
        a.call("airlock_testpack:echo", image)  # first call: torch import, segments created
        t0 = time.perf_counter()
        back = a.call("airlock_testpack:echo", image)
        dt = (time.perf_counter() - t0) * 1e3
        print(
            f"IMAGE 1x1024x1024x3 float32 round trip to {a.name} (warm): {dt:.1f} ms, "
            f"bit-exact: {torch.equal(back, image)}"
        )
        arr = b.call("airlock_testpack:echo", image[0, :4, :4, 0])
        print(f"to {b.name} (no torch there) and back: {type(arr).__module__}.{type(arr).__name__}")

        try:
            a.call("airlock_testpack:raise_", "value", "a pack error")
        except ValueError as e:
            print(f"worker exception re-raised in the host as ValueError: {e}")

        pid = a.pid
        try:
            a.call("airlock_testpack:die", "kill")
        except comfy_airlock.WorkerDied as e:
            print(f"crash reported: {str(e).splitlines()[0]}")
        print(
            f"next call: {a.call('airlock_testpack:echo', 'alive again')!r} "
            f"(pid {pid} -> {a.pid}, generation {a.generation})"
        )
    leftovers = [d for d in os.listdir("/tmp") if d.startswith(f"airlock-{os.getpid()}-")]
    print(f"socket directories left behind: {len(leftovers)}")


if __name__ == "__main__":
    main()

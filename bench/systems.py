"""The three systems bench/compare.py drives, behind one small interface.

Each is driven the way its own tests drive it, with this interpreter (the bench venv's) as the
worker's, and bench/bench_targets.py as the code that runs in the worker:

- comfy-airlock: ``comfy_airlock.Worker(sys.executable, sys_path=[bench/])``, ``call``.
- comfy-env 0.4.46: ``SubprocessWorker(python=sys.executable, working_dir=bench/)`` as in its
  tests (tests/test_transport_probe.py and others); ``call_module`` for functions and
  ``call_method`` (module, class, method, kwargs), the route its node proxies take, for the node.
  No pixi, no ComfyUI.
- a plain pickle worker (bench/pickle_worker.py): pickled ``(function, args)`` over a
  socketpair, the floor of a hand-made isolation; a baseline, not a peer.
- pyisolate 0.10.2: an ``Extension`` built as its test harness builds one
  (tests/harness/host.py): host-coupled (the default for uv), ``share_torch=True``, sandbox
  off, no dependencies, torch's ``file_system`` sharing strategy. Its proxy methods are
  coroutines; a batch of calls runs inside one event loop, as inside ComfyUI's executor. Its
  child venv (a uv venv whose .pth points at this venv's site-packages) is made on the first
  start, under bench/out/, and reused by later starts.

``timed(fn, args, reps)`` times ``reps`` calls of ``fn``; ``args()`` makes each call's
arguments before its clock starts, and each result is dropped after the clock stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PYISOLATE_VENVS = BENCH / "out" / "pyisolate-venvs"

Args = Callable[[], tuple] | None
clock = time.perf_counter_ns


class System:
    key = ""
    label = ""

    def start(self) -> None:
        raise NotImplementedError

    def call(self, fn: str, *args: Any) -> Any:
        raise NotImplementedError

    def node(self, class_name: str, kwargs: dict) -> Any:
        raise NotImplementedError

    def pids(self) -> list[int]:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def timed(self, fn: str, args: Args, reps: int, warmup: int = 0) -> list[int]:
        call, out = self.call, []
        for i in range(warmup + reps):
            a = args() if args else ()
            t0 = clock()
            y = call(fn, *a)
            t1 = clock()
            del y, a
            if i >= warmup:
                out.append(t1 - t0)
        return out

    def timed_node(self, class_name: str, args: Callable[[], dict], reps: int) -> list[int]:
        node, out = self.node, []
        for _ in range(reps):
            kw = args()
            t0 = clock()
            y = node(class_name, kw)
            t1 = clock()
            del y, kw
            out.append(t1 - t0)
        return out


class Airlock(System):
    key, label = "airlock", "comfy-airlock"

    def __init__(self) -> None:
        self.w = None

    def start(self) -> None:
        import comfy_airlock

        self.w = comfy_airlock.Worker(sys.executable, sys_path=[str(BENCH)], name="bench-airlock")

    def call(self, fn: str, *args: Any) -> Any:
        return self.w.call(f"bench_targets:{fn}", *args)

    def node(self, class_name: str, kwargs: dict) -> Any:
        return self.w.call("bench_targets:run_node", class_name, kwargs)

    def pids(self) -> list[int]:
        return [self.w.pid] if self.w is not None and self.w.pid else []

    def stop(self) -> None:
        if self.w is not None:
            self.w.close()
            self.w = None


class ComfyEnv(System):
    key, label = "comfy_env", "comfy-env 0.4.46"

    def __init__(self) -> None:
        self.w = None

    def start(self) -> None:
        from comfy_env.isolation.workers.subprocess import SubprocessWorker

        self.w = SubprocessWorker(python=sys.executable, working_dir=BENCH, name="bench-comfy-env")

    def call(self, fn: str, *args: Any) -> Any:
        # call_module passes keyword arguments only.
        names = {
            "echo": ("x",),
            "make": ("nbytes",),
            "nbytes_of": ("x",),
            "times_one": ("x",),
            "import_comfy": ("comfy_dir", "cpu"),
        }.get(fn, ())
        return self.w.call_module(
            module="bench_targets", func=fn, **dict(zip(names, args, strict=False))
        )

    def node(self, class_name: str, kwargs: dict) -> Any:
        import bench_targets

        method = bench_targets.NODES[class_name].FUNCTION
        return self.w.call_method(
            module_name="bench_targets",
            class_name=class_name,
            method_name=method,
            kwargs=kwargs,
        )

    def pids(self) -> list[int]:
        p = self.w._process if self.w is not None else None
        return [p.pid] if p is not None and p.poll() is None else []

    def stop(self) -> None:
        if self.w is not None:
            self.w.shutdown()
            self.w = None


class _FileSystemSharing:
    """torch's sharing strategy is process-global, and pyisolate needs ``file_system`` (its
    JSON-RPC carries shared-memory file names, not descriptors). Set while pyisolate runs and
    restored after, so the other systems in this process keep torch's default."""

    def __enter__(self) -> None:
        import torch.multiprocessing as tmp

        self.old = tmp.get_sharing_strategy()
        tmp.set_sharing_strategy("file_system")

    def __exit__(self, *exc: object) -> None:
        import torch.multiprocessing as tmp

        tmp.set_sharing_strategy(self.old)


class Pyisolate(System):
    key, label = "pyisolate", "pyisolate 0.10.2"

    def __init__(self) -> None:
        self.ext = None
        self.proxy = None
        self.loop = asyncio.new_event_loop()
        self.sharing = _FileSystemSharing()

    def start(self) -> None:
        asyncio.set_event_loop(self.loop)  # pyisolate's AsyncRPC takes the current loop
        bin_dir = os.path.dirname(sys.executable)  # its venv builder looks for `uv` on PATH
        if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
        if str(BENCH) not in sys.path:
            sys.path.insert(0, str(BENCH))
        from pyisolate._internal.adapter_registry import AdapterRegistry
        from pyisolate.config import ExtensionConfig, SandboxMode
        from pyisolate.host import Extension
        from pyisolate_ext import BenchAdapter, BenchExtension

        AdapterRegistry.unregister()
        AdapterRegistry.register(BenchAdapter())
        module_path = str(BENCH / "pyisolate_ext")
        config = ExtensionConfig(
            name="airlock_bench",
            module_path=module_path,
            isolated=True,
            dependencies=[],
            apis=[],
            share_torch=True,
            share_cuda_ipc=False,
            sandbox_mode=SandboxMode.DISABLED,
            env={},
        )
        PYISOLATE_VENVS.mkdir(parents=True, exist_ok=True)
        self.ext = Extension(
            module_path=module_path,
            extension_type=BenchExtension,
            config=config,
            venv_root_path=str(PYISOLATE_VENVS),
        )
        with self.sharing:
            self.ext.ensure_process_started()
        self.proxy = self.ext.get_proxy()

    def _run(self, coro: Any) -> Any:
        with self.sharing:
            return self.loop.run_until_complete(coro)

    def call(self, fn: str, *args: Any) -> Any:
        return self._run(getattr(self.proxy, fn)(*args))

    def node(self, class_name: str, kwargs: dict) -> Any:
        return self._run(self.proxy.run_node(class_name, kwargs))

    def timed(self, fn: str, args: Args, reps: int, warmup: int = 0) -> list[int]:
        method = getattr(self.proxy, fn)

        async def batch() -> list[int]:
            out = []
            for i in range(warmup + reps):
                a = args() if args else ()
                t0 = clock()
                y = await method(*a)
                t1 = clock()
                del y, a
                if i >= warmup:
                    out.append(t1 - t0)
            return out

        return self._run(batch())

    def timed_node(self, class_name: str, args: Callable[[], dict], reps: int) -> list[int]:
        run_node = self.proxy.run_node

        async def batch() -> list[int]:
            out = []
            for _ in range(reps):
                kw = args()
                t0 = clock()
                y = await run_node(class_name, kw)
                t1 = clock()
                del y, kw
                out.append(t1 - t0)
            return out

        return self._run(batch())

    def pids(self) -> list[int]:
        p = getattr(self.ext, "proc", None) if self.ext is not None else None
        return [p.pid] if p is not None and p.poll() is None else []

    def stop(self) -> None:
        if self.ext is not None:
            # As its harness does: the extension's own stop over RPC, then Extension.stop.
            with contextlib.suppress(Exception):
                self._run(asyncio.wait_for(self.proxy.stop(), 5))
            with self.sharing:
                self.ext.stop()
            self.ext = None
            self.proxy = None
        if not self.loop.is_closed():
            self.loop.close()


class PickleWorker(System):
    """The plain baseline: pickled calls over a socketpair (bench/pickle_worker.py)."""

    key, label = "pickle", "pickle worker"

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None

    def start(self) -> None:
        import pickle_worker

        self._wire = pickle_worker
        ours, theirs = socket.socketpair()
        self.proc = subprocess.Popen(
            [sys.executable, str(BENCH / "pickle_worker.py"), str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        self.sock = ours

    def call(self, fn: str, *args: Any) -> Any:
        wire = self._wire
        wire.send(self.sock, pickle.dumps((fn, args)))
        head = wire.recv_exact(self.sock, wire.HEADER.size)
        if head is None:
            raise RuntimeError("the pickle worker closed its socket")
        (n,) = wire.HEADER.unpack(head)
        ok, value = pickle.loads(wire.recv_exact(self.sock, n))
        if not ok:
            raise RuntimeError(f"pickle worker: {value}")
        return value

    def node(self, class_name: str, kwargs: dict) -> Any:
        return self.call("run_node", class_name, kwargs)

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc is not None and self.proc.poll() is None else []

    def stop(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc is not None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


SYSTEMS: dict[str, type[System]] = {s.key: s for s in (Airlock, ComfyEnv, Pyisolate, PickleWorker)}
PEERS = ("comfy_env", "pyisolate")

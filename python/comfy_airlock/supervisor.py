"""The host's API for worker processes: :class:`Worker`."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from comfy_airlock import (
    _native,
    born_policy,
    heap_policy,
    idle_trim,
    pickling,
    settings,
    thread_policy,
)
from comfy_airlock._runtime import runtime_dir
from comfy_airlock.worker_env import INHERIT_ENV, InheritEnv, worker_env

# Variables of the host that would make another interpreter load the wrong stdlib or packages.
_STRIP = ("PYTHONHOME", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONEXECUTABLE", "__PYVENV_LAUNCHER__")


#: Seconds a new worker process has to connect back (its interpreter started, its preload
#: imported) before its start fails, unless a ``Worker`` is given another.
CONNECT_TIMEOUT_S = 60.0


class Worker:
    """A persistent worker process running another Python interpreter.

    ``python`` is the interpreter (e.g. a venv's ``bin/python``, any CPython >= 3.10). Our
    runtime is put on its path from a private copy of this package; ``sys_path`` entries follow
    it. ``preload`` names modules the worker imports before its first call (where a pack
    registers its codecs). ``env`` is the worker's whole environment; by default (``None``) it
    is the allow-listed part of the host's (what Python, torch and CUDA need; no API keys or
    tokens: :mod:`comfy_airlock.worker_env`), and ``env=comfy_airlock.INHERIT_ENV`` passes the
    host's whole environment, secrets included. ``on_event(topic, payload)`` receives what the worker sends with
    :func:`comfy_airlock.worker.runtime.emit` while a call runs, on the calling thread. The
    process starts at once and is started again, as a new generation, on the first call after
    it dies.

    ``liveness=(interval, grace)`` asks the worker for its memory report every ``interval``
    seconds on its control lane (:meth:`last_report` reads the latest) and kills it as hung
    after ``grace`` seconds without an answer (``grace`` None: never); a busy worker still
    answers, so long calls are never killed by this. An interrupted call
    (:meth:`interrupt`, or ``interrupted`` in :meth:`run`) sees the flag at its next
    interruption check; if it has not stopped ``signal_after`` seconds later the worker gets
    SIGINT, and ``kill_after`` seconds after that SIGKILL (None leaves a step out).

    Every wait on the worker is bounded by these, sends as well as receives: a call whose
    worker stops reading its call lane (a 4 MiB argument does not fit a socket buffer) is still
    stopped by its deadline, an interrupt, liveness or :meth:`close`. Input the worker sends
    that the protocol forbids (a corrupt frame, a forged descriptor or segment, a message out
    of place, on either lane) is counted once in ``_native.rejections()`` and ends the worker:
    the call raises :class:`ProtocolError` and the next call starts a new generation.

    ``pickle`` names the types (``module.QualName``) that may cross with pickle, both ways,
    checked on both sides (see :mod:`comfy_airlock.pickling`); by default nothing is pickled.

    >>> with Worker("/usr/bin/python3") as w:  # doctest: +SKIP
    ...     w.call("math:sqrt", 2.0)
    1.4142135623730951
    """

    def __init__(
        self,
        python: str | os.PathLike[str],
        *,
        sys_path: Iterable[str | os.PathLike[str]] = (),
        preload: Iterable[str] = (),
        env: Mapping[str, str] | InheritEnv | None = None,
        name: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        on_event: Callable[[str, Any], None] | None = None,
        liveness: tuple[float, float | None] | None = None,
        signal_after: float | None = 5.0,
        kill_after: float | None = 10.0,
        pickle: Iterable[str] = (),
    ) -> None:
        python = os.fspath(python)
        if not os.access(python, os.X_OK):
            raise _native.SpawnError(f"worker interpreter {python!r} is not an executable file")
        if name is None:
            name = Path(python).parent.parent.name or "worker"
        if env is None:
            environ = worker_env({}, {})
        elif env is INHERIT_ENV:
            environ = dict(os.environ)
        elif isinstance(env, Mapping):
            environ = dict(env)
        else:
            raise TypeError(
                f"env must be a mapping, None or comfy_airlock.INHERIT_ENV, not {type(env).__name__}"
            )
        for k in _STRIP:
            environ.pop(k, None)
        thread_policy.apply(environ)
        heap_policy.apply(environ)
        born_policy.apply(environ)
        path = [runtime_dir(), *(os.fspath(p) for p in sys_path)]
        environ["PYTHONPATH"] = os.pathsep.join(path)
        environ["PYTHONUNBUFFERED"] = "1"
        environ[settings.ENV["preload"]] = ",".join(preload)
        environ[settings.ENV["log_level"]] = str(logging.getLogger().getEffectiveLevel())
        self._pickle = pickling.PicklePolicy(pickle, owner=name, may_import=False)
        environ[pickling.ENV] = ",".join(sorted(self._pickle.names))
        self._native = _native.Worker(
            name,
            python,
            ["-m", "comfy_airlock.worker"],
            sorted(environ.items()),
            os.fspath(cwd) if cwd is not None else None,
            connect_timeout,
            on_event,
            liveness,
            signal_after,
            kill_after,
        )
        # The idle trim gives our idle shared memory back (the native worker keeps the clock).
        idle_trim.register(self, worker=False)

    def call(self, target: str, /, *args: Any, **kwargs: Any) -> Any:
        """Runs ``target`` (``"module:qualname"``, importable in the worker) and returns its
        result. An exception in the worker is raised here with the worker's traceback."""
        if not self._pickle and not pickling.in_force():
            return self._native.call(target, args, kwargs)  # the common case, kept cheap
        with pickling.applying(self._pickle or None):
            return self._native.call(target, args, kwargs)

    def route_call(self, target: str, /, *args: Any) -> Any:
        """Runs ``target`` on the worker's route lane, beside the call that runs, if one does
        (ADR 0055): for the pack's HTTP requests, which a node may wait for while it runs. Not
        counted as a call (the idle trim's clock), never interrupted, without a deadline: the
        worker bounds its handler by the request's expiry. Plain values only (no pickle)."""
        return self._native.route_call(target, args)

    def idle_seconds(self) -> float | None:
        """Seconds since the last call ended; None while one runs."""
        return self._native.idle_seconds()

    def run(
        self,
        target: str,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        interrupted: Callable[[], bool] | None = None,
        deadline: float | None = None,
    ) -> Any:
        """:meth:`call`, stopped (flag, then the escalation) when ``interrupted()`` becomes
        true or after ``deadline`` seconds: raises :class:`CallInterrupted` or
        :class:`DeadlineExceeded`, with the worker's own error as ``__cause__``."""
        with pickling.applying(self._pickle or None):
            return self._native.call(
                target,
                tuple(args),
                dict(kwargs or {}),
                interrupted=interrupted,
                deadline=deadline,
            )

    def interrupt(self) -> None:
        """Asks the running call to stop, from any thread (no-op when none is running)."""
        self._native.interrupt()

    @property
    def name(self) -> str:
        return self._native.name

    @property
    def pid(self) -> int | None:
        """Pid of the current process; None between a death and the next call."""
        return self._native.pid

    @property
    def generation(self) -> int:
        """Starts at 1 and is bumped on every (re)spawn."""
        return self._native.generation

    @property
    def alive(self) -> bool:
        return self._native.alive

    @property
    def lane(self) -> _native.Lane | None:
        """The current call lane (pool statistics for leak checks)."""
        return self._native.lane

    def info(self) -> dict[str, Any] | None:
        """What the worker reported at its handshake: pid, generation, Python, torch, numpy."""
        return self._native.info()

    def ping(self, timeout: float = 5.0) -> float:
        """Control-lane round trip in seconds; answered even while a call is running."""
        return self._native.ping(timeout)

    def lane_timing(self) -> dict[str, Any] | None:
        """What the call lane knows about its waits (ADR 0046): how long its next read may
        spin, what its wake-ups cost, both sides' last receipt and send; None when no process
        runs."""
        return self._native.lane_timing()

    def last_report(self) -> Any:
        """The worker's memory report as its liveness timer last read it from the control
        thread (also while a call runs); None when no process runs or none was read yet.
        Waits for nothing."""
        return self._native.last_report()

    def model_command(
        self, generation: int, model: int, op: str, arg: float = 0.0, timeout: float = 30.0
    ) -> tuple[int, str | None, Any]:
        """Runs ``op`` ("unload", "partially_unload", "partially_load") on a model of the
        worker of ``generation``, on the control lane ("pin_ceiling" and "cache_headroom" set
        the worker's RAM budget instead, ``model`` unused: host/memory/ram.py). Returns ``(bytes, refusal, report)``;
        a command for a generation that is no longer running is refused without being sent."""
        return self._native.model_command(generation, model, op, arg, timeout)

    def kill(self) -> None:
        """SIGKILL the current process and wait (at most 2 s) until it is gone. The next call
        starts a new generation; a call running meanwhile raises :class:`WorkerDied`."""
        self._native.kill()

    def close(self, grace: float = 5.0) -> str | None:
        """Asks the worker to exit, waits ``grace`` seconds, then kills it. Returns how it
        ended. Idempotent. Bounded even when the worker reads nothing (the request to exit
        waits at most ``grace`` to be sent); a call running in another thread then raises
        :class:`WorkerDied`."""
        return self._native.close(grace)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Worker {self.name!r} pid={self.pid} generation={self.generation}>"

"""Every ``AIRLOCK_*`` variable Python reads, read once per process, typed, in one place.

:func:`get` reads this process's environment the first time it is called and keeps the result:
the host's knobs (timers, the reserve, the memory policies), what the host hands its workers
(their socket, preload list, ComfyUI configuration, sandbox and pickle rules), and the
simulated card that stands for the GPU in tests. No other module of this package names an
``AIRLOCK_*`` variable (``tests/test_settings.py`` checks it): code that sets one for a worker
takes its name from :data:`ENV`. Variables only the Rust core reads are listed in
:data:`RUST_ONLY` (the core reads each in one module of ``crates/``), so that the user guide's
reference table (:func:`reference_table`, ``docs/user-guide.md``) names all of them.

A value that does not parse is reported on the ``comfy_airlock`` logger, naming the variable,
and its default is used: a typo in a timer never stops ComfyUI. Tests that change a knob while
the process runs assign the field (``settings.get().idle_release_s = 1.0``): the product reads
the fields at each use.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("comfy_airlock")

MIB = 1 << 20
_OFF = ("off", "none", "never")


def _seconds(name: str, raw: str | None, default: float | None) -> float | None:
    """Seconds: unset or blank is the default, ``off``/``none``/``never`` is None (the step
    is left out), a negative or non-number is reported and the default used."""
    if raw is None or not raw.strip():
        return default
    if raw.strip().lower() in _OFF:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value < 0:
        log.error("comfy-airlock: %s=%r is not a number of seconds; using %s", name, raw, default)
        return default
    return value


def _interval(name: str, raw: str | None, default: float) -> float:
    """Seconds that cannot be turned off (a timer's period): ``off`` is reported too."""
    value = _seconds(name, raw, default)
    if value is None or value <= 0:
        log.error("comfy-airlock: %s=%r must be a positive number of seconds", name, raw)
        return default
    return value


def _mib(name: str, raw: str | None, default: int) -> int:
    """Mebibytes, as bytes: unset, blank, ``off`` or ``0`` is the default's meaning of off."""
    if raw is None or not raw.strip():
        return default
    if raw.strip().lower() in _OFF:
        return 0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value < 0:
        log.error("comfy-airlock: %s=%r is not a number of MiB; using %d", name, raw, default)
        return default
    return int(value * MIB)


def _number(name: str, raw: str | None, default: int) -> int:
    if raw is None or not raw.strip():
        return default
    try:
        return int(raw)
    except ValueError:
        log.error("comfy-airlock: %s=%r is not a whole number; using %d", name, raw, default)
        return default


def _switch(on_unless: tuple[str, ...] = (), off_unless: tuple[str, ...] = ()) -> Any:
    def parse(name: str, raw: str | None, default: bool) -> bool:
        if raw is None or not raw.strip():
            return default
        word = raw.strip().lower()
        return word not in on_unless if on_unless else word in off_unless

    return parse


def _text(name: str, raw: str | None, default: str | None) -> str | None:
    return raw if raw else default


def _list(sep: str) -> Any:
    def parse(name: str, raw: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
        if not raw:
            return default
        return tuple(p.strip() for p in raw.split(sep) if p.strip())

    return parse


def _json(name: str, raw: str | None, default: dict[str, Any]) -> dict[str, Any]:
    if not raw:
        return dict(default)
    value = json.loads(raw)  # set by the host: a bad value is a bug to see, not a typo
    if not isinstance(value, dict):
        raise ValueError(f"{name} must hold a JSON object, not {type(value).__name__}")
    return value


def knob(
    env: str,
    parse: Callable[[str, str | None, Any], Any],
    default: Any,
    doc: str,
    *,
    side: str = "host",
    shown: str | None = None,
) -> Any:
    """A field read from ``env``. ``side``: who reads it (``host``, ``worker``, ``both``: those
    and the core, ``sides``: ComfyUI and its workers but not the core; ``internal``: set by the
    host for its worker, not for users). ``shown``: the default as the user guide prints it."""
    meta = {"env": env, "parse": parse, "doc": doc, "side": side, "shown": shown}
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class Settings:
    """This process's ``AIRLOCK_*`` settings; each field names its variable."""

    # --- packs and environments (host) ----------------------------------------------------
    home: str | None = knob(
        "AIRLOCK_HOME",
        _text,
        None,
        "where environments, build logs and the scan cache live (the Rust env builder reads "
        "it too, by the same rule)",
        shown="`~/.local/share/comfy-airlock` (XDG)",
    )
    packs_path: tuple[str, ...] = knob(
        "AIRLOCK_PACKS_PATH",
        _list(os.pathsep),
        (),
        "more directories of isolated packs, `:`-separated, beside `isolated_nodes/`",
        shown="empty",
    )
    auto_build: bool = knob(
        "AIRLOCK_AUTO_BUILD",
        _switch(on_unless=("0", "false", "no")),
        True,
        "`0` (or `false`, `no`): ComfyUI never builds an environment; a pack without its "
        "environment is reported instead (build it with `airlock build`)",
        shown="`1`",
    )
    rescan: bool = knob(
        "AIRLOCK_RESCAN",
        _switch(off_unless=("1", "true", "yes")),
        False,
        "`1`: import again packs whose import failed at an earlier start (a cached failure "
        "is otherwise kept until the pack or its environment changes)",
        shown="`0`",
    )
    start_on_queue: bool = knob(
        "AIRLOCK_START_ON_QUEUE",
        _switch(on_unless=("0", "false", "no")),
        True,
        "`0` (or `false`, `no`): a queued prompt does not start the workers it needs; each "
        "starts when its pack's first node runs (`prestart = true` still starts one with "
        "ComfyUI)",
        shown="`1`",
    )
    worker_env: tuple[str, ...] = knob(
        "AIRLOCK_WORKER_ENV",
        _list(","),
        (),
        "more of ComfyUI's variables that reach workers (comma-separated names, `NAME_*` for "
        "a prefix); see the allow-list in section 4",
        shown="empty",
    )
    cache_dir: str | None = knob(
        "AIRLOCK_CACHE_DIR",
        _text,
        None,
        "where the private copy of comfy-airlock that workers import is kept",
        shown="`~/.cache/comfy-airlock` (XDG)",
    )
    # --- workers: liveness and interrupts (host) -----------------------------------------
    hung_grace_s: float | None = knob(
        "AIRLOCK_HUNG_GRACE_S",
        _seconds,
        30.0,
        "a worker that does not answer its control lane for this long is declared hung and "
        "replaced; `off` disables the watch",
        shown="`30`",
    )
    liveness_interval_s: float | None = knob(
        "AIRLOCK_LIVENESS_INTERVAL_S",
        _seconds,
        1.0,
        "how often workers are pinged; each ping reads the worker's memory report, so it runs "
        "at least as often as `AIRLOCK_HEARTBEAT_S`, and also with the hung watch off",
        shown="`1`",
    )
    interrupt_signal_s: float | None = knob(
        "AIRLOCK_INTERRUPT_SIGNAL_S",
        _seconds,
        5.0,
        "seconds after a cancel before the worker gets SIGINT (Python stops the node at its "
        "next bytecode); `off` skips the step",
        shown="`5`",
    )
    interrupt_kill_s: float | None = knob(
        "AIRLOCK_INTERRUPT_KILL_S",
        _seconds,
        10.0,
        "seconds after that before the worker is killed and a new one serves the next "
        "prompt; `off` skips the step",
        shown="`10`",
    )
    # --- memory (host) ---------------------------------------------------------------------
    heartbeat_s: float = knob(
        "AIRLOCK_HEARTBEAT_S",
        _interval,
        2.0,
        "how often the host takes the workers' latest reports (read by the liveness ping) and "
        "runs the idle policies",
        shown="`2`",
    )
    idle_release_s: float | None = knob(
        "AIRLOCK_IDLE_RELEASE_S",
        _seconds,
        600.0,
        "a worker that has run no node for this long unloads its models from the GPU (they "
        "load again on its next use); `off` keeps them",
        shown="`600`",
    )
    pressure_free: int = knob(
        "AIRLOCK_PRESSURE_FREE_MIB",
        _mib,
        0,
        "MiB: when the GPU's true free memory drops below this, idle workers' models are "
        "released at once, least recently used first, until it is free again",
        shown="`0` (off)",
    )
    reserve: bool = knob(
        "AIRLOCK_RESERVE",
        _switch(on_unless=("off", "0", "false", "no")),
        True,
        "`off`: publish no reserve for a host whose free-memory reading is blind to other "
        "processes (WDDM) and translate no request (docs/memory.md); device-wide it is 0 anyway",
        shown="`on`",
    )
    idle_trim_s: float | None = knob(
        "AIRLOCK_IDLE_TRIM_S",
        _seconds,
        5.0,
        "a side (ComfyUI for each worker, a worker for itself) that made no call for this long "
        "gives its idle shared memory back (at once under RAM pressure); `off` keeps it",
        side="sides",
        shown="`5`",
    )
    module_hooks: bool = knob(
        "AIRLOCK_MODULE_HOOKS",
        _switch(on_unless=("off", "0", "false", "no")),
        True,
        "`off`: a worker does not watch its pack's `torch.nn.Module` moves, so a module the "
        "pack moves onto ComfyUI's device is known only if the pack calls `register_model`",
        side="worker",
        shown="`on`",
    )
    born_budget: int = knob(
        "AIRLOCK_BORN_MIB",
        _mib,
        1024 * MIB,
        "MiB of a worker's own blocks (torch's CPU tensors and numpy's arrays of 256 KiB or more "
        "made while a call runs) that may live in its shared memory at once, so that its "
        "outputs are sent without a copy (Linux; ADRs 0044, 0045); past it they come from the heap and are copied; "
        "`0` or `off`: none (the worker starts without `libairlock_born.so` preloaded)",
        side="sides",
        shown="`1024`",
    )
    cuda_ipc: bool = knob(
        "AIRLOCK_CUDA_IPC",
        _switch(on_unless=("off", "0", "false", "no")),
        True,
        "`off`: a CUDA tensor crosses through host memory (copied off the card and back on) "
        "instead of by CUDA IPC (opened and copied on the card by the receiver); read by the "
        "side that sends it",
        side="sides",
        shown="`on`",
    )
    keep_sent: int = knob(
        "AIRLOCK_KEEP_SENT_MIB",
        _mib,
        1024 * MIB,
        "MiB of copies ComfyUI keeps per worker (of tensors sent twice) so that a tensor sent "
        "again unchanged goes without a copy; `0` (or `off`) copies on every send",
        shown="`1024`",
    )
    # --- routes --------------------------------------------------------------------------
    route_timeout_s: float = knob(
        "AIRLOCK_ROUTE_TIMEOUT",
        _interval,
        60.0,
        "seconds a forwarded request to a pack's route may take (at least 1); a worker "
        "started for the request has as long again, plus 60 s, to start",
        shown="`60`",
    )
    route_max_bytes: int = knob(
        "AIRLOCK_ROUTE_MAX_BYTES",
        _number,
        1 << 30,
        "the largest response a pack's route may send (read by the worker)",
        side="worker",
        shown="`1073741824` (1 GiB)",
    )
    # --- the device ----------------------------------------------------------------------
    sim_gpu: tuple[str, ...] = knob(
        "AIRLOCK_SIM_GPU",
        _list(os.pathsep),
        (),
        "tests and benchmarks: the simulated card(s) that stand for the GPU (`:`-separated "
        "files, the first is `cuda:0`); the fake NVML library and the core read it too",
        side="both",
        shown="unset",
    )
    nvml_library: str | None = knob(
        "AIRLOCK_NVML_LIBRARY",
        _text,
        None,
        "the NVML library to load instead of the driver's `libnvidia-ml.so.1` (the core loads "
        "it; Python lets a sandboxed worker read it)",
        side="both",
        shown="the driver's",
    )
    # --- set by the host for its worker ----------------------------------------------------
    worker: bool = knob(
        "AIRLOCK_WORKER",
        _switch(off_unless=("1",)),
        False,
        "`1` in a pack's worker process",
        side="internal",
    )
    socket: str | None = knob(
        "AIRLOCK_SOCKET",
        _text,
        None,
        "the socket a worker connects to (set by the core's spawn)",
        side="internal",
    )
    worker_ld_preload: str | None = knob(
        "AIRLOCK_WORKER_LD_PRELOAD",
        _text,
        None,
        "the `LD_PRELOAD` a worker gives back to its environment once started (the host puts "
        "`libairlock_born.so` in front of it)",
        side="internal",
    )
    preload: tuple[str, ...] = knob(
        "AIRLOCK_PRELOAD",
        _list(","),
        (),
        "modules a worker imports before it connects",
        side="internal",
    )
    log_fd: int | None = knob(
        "AIRLOCK_LOG_FD",
        _number,
        None,
        "the pipe a worker sends its logging records on (set by the core's spawn)",
        side="internal",
    )
    log_level: int = knob(
        "AIRLOCK_LOG_LEVEL",
        _number,
        logging.WARNING,
        "the host's logging level, which a worker's root logger takes",
        side="internal",
    )
    comfy: dict[str, Any] = knob(  # noqa: RUF009 (knob is a field() with a default factory)
        "AIRLOCK_COMFY",
        _json,
        {},
        "ComfyUI's tree, flags, folders and the pack, for a worker's ComfyUI (JSON)",
        side="internal",
    )
    pickle: tuple[str, ...] = knob(
        "AIRLOCK_PICKLE",
        _list(","),
        (),
        "the types a pack lets cross as pickle (airlock.toml `pickle`)",
        side="internal",
    )
    name: str = knob(
        "AIRLOCK_NAME",
        _text,
        "worker",
        "the worker's name (its pack), for its messages (set by the core's spawn)",
        side="internal",
    )
    sandbox: str | None = knob(
        "AIRLOCK_SANDBOX",
        _text,
        None,
        "the sandbox rules a worker applies to itself (JSON, made by the host)",
        side="internal",
    )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        environ = os.environ if environ is None else environ
        return cls(**{f.name: parse(f.name, environ) for f in dataclasses.fields(cls)})


#: The variable of each field (``ENV["comfy"] == "AIRLOCK_COMFY"``), for code that sets one.
ENV: dict[str, str] = {f.name: f.metadata["env"] for f in dataclasses.fields(Settings)}

#: Variables only the Rust core reads: (module in ``crates/``, default, what it does).
RUST_ONLY: dict[str, tuple[str, str, str]] = {
    "AIRLOCK_CONDA_CHANNEL_ALIAS": (
        "airlock-conda/src/channels.rs",
        "`https://conda.anaconda.org`",
        "where a conda channel given by name (`conda-forge`) is looked up: a mirror, or a "
        "local folder (conda's `channel_alias`)",
    ),
    "AIRLOCK_CUDA_WHEELS": (
        "airlock-env/src/cuda_wheels.rs",
        "comfy-env's `COMFY_ENV_CUDA_WHEELS_INDEX`, else comfy-env's index",
        "the index (a URL or a folder) a comfy-env pack's `[cuda] packages` are looked up in",
    ),
    "AIRLOCK_CUDA_VERSION": (
        "airlock-env/src/cuda_wheels.rs",
        "the CUDA version the host's torch was built for (or `CONDA_OVERRIDE_CUDA`)",
        "the CUDA version `[cuda] packages` wheels are matched against",
    ),
    "AIRLOCK_UV": (
        "airlock-env/src/uv.rs",
        "`uv` on `PATH`",
        "the `uv` binary that builds environments",
    ),
    "AIRLOCK_SHM_LIMIT_MIB": (
        "airlock-shm/src/settings.rs",
        "`65536` (64 GiB)",
        "the most each side's pool of segments may hold at once; a transfer that does not fit "
        "fails naming the pool and this variable",
    ),
    "AIRLOCK_MAX_PEER_MAP_MIB": (
        "airlock-shm/src/settings.rs",
        "`65536` (64 GiB)",
        "the most of one worker's shared memory ComfyUI maps at once; a worker that announces "
        "more is refused and replaced",
    ),
    "AIRLOCK_MAX_PEER_SEGMENTS": (
        "airlock-shm/src/settings.rs",
        "`256`",
        "the most segments (each a file descriptor in ComfyUI) one worker may hand over at once",
    ),
    "AIRLOCK_LANE_SPIN_US": (
        "airlock-supervisor/src/spin.rs",
        "measured",
        "microseconds a side waiting on a call lane (ComfyUI for a reply, a worker for the next "
        "call) asks without sleeping, yielding the CPU, before it sleeps (ADR 0035); unset: "
        "twice what the lane's recent wake-ups took, 5 to 1000 (ADR 0046); `0` sleeps at once; "
        "at most `1000`",
    ),
    "AIRLOCK_LANE_MAIL": (
        "airlock-supervisor/src/mailbox.rs",
        "on",
        "`off` sends every frame of a call lane through its socket: by default a small one "
        "without descriptors goes through a mailbox in the page host and worker share, and a "
        "sleeping reader is woken by a futex (ADR 0061); either side's `off` suffices",
    ),
    "AIRLOCK_SIM_SEMANTICS": (
        "airlock-sim/src/semantics.rs",
        "`device_wide`",
        "tests: the semantics of simulated cards created without explicit ones (`wddm`, "
        "`wddm:key=value,...`)",
    ),
    "AIRLOCK_SIGNAL_FD": (
        "airlock-supervisor/src/signal_page.rs",
        "set by the core",
        "internal: the interrupt page a worker inherits",
    ),
}

_SETTINGS: list[Settings] = []


def parse(name: str, environ: Mapping[str, str]) -> Any:
    """Field ``name`` as ``environ`` (not this process's environment) would set it: for code
    that decides for another process, such as a worker's allow-listed environment."""
    f = next(f for f in dataclasses.fields(Settings) if f.name == name)
    default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
    return f.metadata["parse"](f.metadata["env"], environ.get(f.metadata["env"]), default)


def get() -> Settings:
    """This process's settings, read from its environment on the first call."""
    if not _SETTINGS:
        _SETTINGS.append(Settings.from_env())
    return _SETTINGS[0]


def reference_table() -> str:
    """The user guide's table of every ``AIRLOCK_*`` variable (docs/user-guide.md, section 9),
    made from the fields above and :data:`RUST_ONLY`."""
    rows = ["| variable | default | read by | what it does |", "|---|---|---|---|"]
    readers = {
        "host": "ComfyUI",
        "worker": "worker",
        "both": "ComfyUI, worker, core",
        "sides": "ComfyUI, worker",
    }
    for f in dataclasses.fields(Settings):
        meta = f.metadata
        if meta["side"] == "internal":
            continue
        rows.append(
            f"| `{meta['env']}` | {meta['shown']} | {readers[meta['side']]} | {meta['doc']} |"
        )
    for env, (_module, shown, doc) in RUST_ONLY.items():
        rows.append(f"| `{env}` | {shown} | core | {doc} |")
    internal = [
        f"`{f.metadata['env']}` ({f.metadata['doc']})"
        for f in dataclasses.fields(Settings)
        if f.metadata["side"] == "internal"
    ]
    rows += [
        "",
        "Set by comfy-airlock for its workers, never by users: " + "; ".join(internal) + ".",
    ]
    return "\n".join(rows)


if __name__ == "__main__":  # python -m comfy_airlock.settings: the table, for the user guide
    sys.stdout.write(reference_table() + "\n")

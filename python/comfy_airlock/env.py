"""Pack configs, pack discovery and environments (a typed wrapper over the Rust builder).

A pack declares its environment in ``airlock.toml`` at its root (a ``comfy-env.toml`` is read
too)::

    python = "3.10"                      # optional; default: the host's interpreter
    dependencies = ["numpy<2", "torch==2.4.1"]
    extra-index-urls = ["https://download.pytorch.org/whl/cu121"]
    find-links = ["wheels"]              # folders (relative to the pack) or URLs
    entry = "nodes"                      # optional; module defining NODE_CLASS_MAPPINGS
    comfy = true                         # optional; add ComfyUI's requirements (default: detect)
    call-deadline = 600                  # optional; seconds one call may run
    pickle = ["datetime.datetime"]       # optional; types that may cross with pickle
    packs = ["Pack-A", "Pack-B"]         # optional; a group: these subfolders, one worker

    [env_vars]
    KMP_DUPLICATE_LIB_OK = "TRUE"

    [sandbox]                            # optional; a Landlock sandbox (docs/security.md)
    enabled = true
    network = false
    read = ["~/.cache/huggingface"]      # extra paths; relative ones are inside the pack
    write = []

Environments are built by the ``uv`` binary into ``<home>/envs/<key>/`` (the ``home`` setting,
default ``~/.local/share/comfy-airlock``), keyed by their resolved lock; see
``docs/adr/0004-environments.md``. Every error message starts with the pack's name.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Literal, TypedDict

from comfy_airlock import _native, settings
from comfy_airlock._native import ConfigError, EnvError, EnvMissing

__all__ = [
    "ConfigError",
    "DiscoveredPack",
    "EnvError",
    "EnvInfo",
    "EnvMissing",
    "PackConfig",
    "Sandbox",
    "discover_packs",
    "ensure_env",
    "pack_config",
]


class Sandbox(TypedDict):
    """``[sandbox]``: off unless ``enabled``; ``read``/``write`` are extra paths."""

    enabled: bool
    """Whether the worker applies the Landlock sandbox."""
    network: bool
    """Whether TCP and UDP stay allowed."""
    read: list[str]
    """Extra paths the worker may read."""
    write: list[str]
    """Extra paths the worker may write (relative ones are inside the pack's folder)."""


class PackConfig(TypedDict):
    """What a pack declares (see the module docstring)."""

    name: str
    """The pack's name."""
    dir: str
    """The pack's folder."""
    file: str
    """The config file read."""
    format: Literal["airlock.toml", "comfy-env.toml"]
    """Which kind of file it is."""
    python: str | None
    """The Python version asked for (None: the host's)."""
    dependencies: list[str]
    """PyPI requirements."""
    requirements_file: str | None
    """The requirements.txt they were read from (airlock.toml without ``dependencies``)."""
    index_url: str | None
    """The package index."""
    extra_index_urls: list[str]
    """More indexes."""
    find_links: list[str]
    """Find-links locations."""
    env_vars: dict[str, str]
    """Environment variables of the worker."""
    entry: str | None
    """The module the worker imports as the pack."""
    members: list[str]
    """A group's packs (``packs``): subfolders its one worker imports in this order (ADR 0054);
    empty for a single pack."""
    comfy: bool | None
    """Whether ComfyUI's requirements go in (None: detected from the pack's imports)."""
    call_deadline: float | None
    """Seconds one call may run (None: no deadline)."""
    sandbox: Sandbox
    """The sandbox."""
    pickle: list[str]
    """Types that may cross with pickle (``module.QualName``)."""
    prestart: bool
    """Whether the worker starts with ComfyUI (``prestart = true``) rather than at first need."""
    conda: list[str] | None
    """comfy-env.toml's conda match specs (None: no conda packages; ADR 0024)."""
    channels: list[str]
    """The conda channels."""
    cuda_packages: list[str]
    """comfy-env.toml's ``[cuda] packages``: wheels matched to the host's torch and CUDA."""
    notices: list[str]
    """What the config says that is read but not acted on."""


class DiscoveredPack(TypedDict):
    """A pack found by :func:`discover_packs`: its config, or why it could not be read."""

    name: str
    """Its name."""
    dir: str
    """Its folder."""
    placement: Literal["managed", "custom_nodes"]
    """``"managed"``: in ``isolated_nodes/`` or a folder of the packs path (only we import it);
    ``"custom_nodes"``: ComfyUI imports its ``__init__.py``."""
    opted_in: bool
    """A ``custom_nodes`` pack whose ``__init__.py`` calls ``register_nodes``."""
    config: PackConfig | None
    """Its config; None when it is invalid."""
    error: str | None
    """Why the config is invalid."""


class EnvInfo(TypedDict):
    """A pack's ready environment."""

    name: str
    """The pack's name."""
    pack_dir: str
    """The pack's folder."""
    python: str
    """The env's interpreter."""
    env_dir: str
    """The env's folder."""
    key: str
    """The env's key (content-addressed by its lock and interpreter)."""
    lock_path: str
    """The lock the env was synced from."""
    log_path: str
    """The pack's build log."""
    built: bool
    """Whether uv ran for this call."""
    env_vars: dict[str, str]
    """Environment variables of the worker."""
    entry: str | None
    """The module the worker imports as the pack."""
    members: list[str]
    """A group's packs (``packs``): subfolders its one worker imports in this order (ADR 0054);
    empty for a single pack."""
    comfy: bool
    """Whether ComfyUI's requirements are in the env."""
    python_version: str
    """The interpreter's version."""
    conda: bool
    """Whether the env is a conda prefix (ADR 0024)."""
    notices: list[str]
    """What its config says that is read but not acted on."""
    call_deadline: float | None
    """Seconds one call may run (None: no deadline)."""
    sandbox: Sandbox
    """The sandbox."""
    pickle: list[str]
    """Types that may cross with pickle."""
    prestart: bool
    """Whether the worker starts with ComfyUI rather than at first need."""


def pack_config(
    pack_dir: str | os.PathLike[str], config: str | os.PathLike[str] | None = None
) -> PackConfig:
    """Reads the config of the pack in ``pack_dir`` (``airlock.toml`` wins over
    ``comfy-env.toml``), or its comfy-env config ``config``. Raises :class:`ConfigError`
    naming the pack, the file, the line and the key."""
    return _native.pack_config(  # type: ignore[return-value]
        os.fspath(pack_dir), None if config is None else os.fspath(config)
    )


def config_file(pack_dir: str | os.PathLike[str]) -> str:
    """The config file of the pack in ``pack_dir`` (the one :func:`pack_config` reads, else
    where its ``airlock.toml`` goes): where a message tells the user to add something."""
    try:
        return pack_config(pack_dir)["file"]
    except Exception:  # a broken or missing config still has a place
        return os.path.join(os.fspath(pack_dir), "airlock.toml")


def discover_packs(
    base_dir: str | os.PathLike[str], extra_roots: Sequence[str | os.PathLike[str]] | None = None
) -> list[DiscoveredPack]:
    """The packs under ``<base_dir>/isolated_nodes/``, each of ``extra_roots`` (default:
    the ``packs_path`` setting), and the packs in
    ``<base_dir>/custom_nodes/`` that have an ``airlock.toml``. A pack whose config is broken is
    listed with ``error`` set; it never hides the others."""
    if extra_roots is None:
        extra_roots = list(settings.get().packs_path)
    roots = [os.fspath(r) for r in extra_roots]
    return _native.discover_packs(os.fspath(base_dir), roots)  # type: ignore[return-value]


def ensure_env(
    pack_dir: str | os.PathLike[str],
    *,
    comfyui_dir: str | os.PathLike[str] | None = None,
    home: str | os.PathLike[str] | None = None,
    uv: str | os.PathLike[str] | None = None,
    host_python: str | os.PathLike[str] | None = None,
    build: bool = True,
    progress: Callable[[str], None] | None = None,
    config: str | os.PathLike[str] | None = None,
) -> EnvInfo:
    """Makes sure the pack in ``pack_dir`` has its environment and returns it.

    Unchanged packs cost one interpreter probe: neither uv nor the network is touched. With
    ``build=False`` a missing or out-of-date environment raises :class:`EnvMissing` (run
    ``airlock build``) instead of being built. ``progress`` receives phase lines
    (``"<pack>: resolving ..."``); without it, a spinner is shown when stderr is a terminal.
    The GIL is released while building.

    ``comfyui_dir`` (default ``$COMFYUI_DIR``) supplies ComfyUI's requirements to packs that
    import ComfyUI; ``host_python`` (default: this interpreter) is used by packs that do not
    ask for a Python version; ``uv`` and ``home`` override the core's ``uv`` and ``home``
    settings (the user guide's table). ``config`` names one of the pack's comfy-env configs
    (:func:`comfy_env_configs`), each its own environment.

    Raises :class:`ConfigError` for a bad config, :class:`EnvMissing`, or :class:`EnvError`
    (with ``pack``, ``requirement``, ``log_path`` and ``uv_message`` attributes).
    """

    def opt(p: str | os.PathLike[str] | None) -> str | None:
        return None if p is None else os.fspath(p)

    return _native.ensure_env(  # type: ignore[return-value]
        os.fspath(pack_dir),
        comfyui_dir=opt(comfyui_dir),
        home=opt(home),
        uv=opt(uv),
        host_python=opt(host_python) or sys.executable,
        build=build,
        progress=progress,
        config=opt(config),
    )


def comfy_env_configs(pack_dir: str | os.PathLike[str]) -> list[str]:
    """The ``comfy-env.toml`` files of a pack as comfy-env binds them, each one environment:
    ``nodes/comfy-env.toml``, else each ``nodes/<sub>/comfy-env.toml`` (ADR 0025)."""
    return _native.comfy_env_configs(os.fspath(pack_dir))  # type: ignore[no-any-return]

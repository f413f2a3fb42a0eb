"""A pack's optional Landlock sandbox (``[sandbox] enabled = true`` in its ``airlock.toml``).

The host decides what the worker may touch, from what only it knows (ComfyUI's folders, the
pack, its environment), checks that this kernel can enforce it, and hands it over in
the ``sandbox`` setting's variable. The worker adds what only it knows (its interpreter's prefixes and
``sys.path``, its private ``TMPDIR``) and applies the rules to itself first thing in ``main``,
while it has a single thread, before it imports ComfyUI or the pack
(:func:`apply_from_env`). The rules themselves, and what every Python needs besides (system
libraries, a few ``/etc`` files, its own ``/proc`` entry), are in the ``airlock-sandbox``
crate; ``docs/security.md`` lists what is allowed and what is not.

The worker may read: the pack, its environment and interpreter, ComfyUI's source tree (not its
``user/``, ``custom_nodes/`` or ``isolated_nodes/`` folders, whose names it may list but whose
files it may not read), ComfyUI's model and input folders, and the pack's ``read`` paths. It may
write: ComfyUI's output and temp folders, its private temp dir, and the pack's ``write`` paths.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

from comfy_airlock import _native, settings

log = logging.getLogger("comfy_airlock")

ENV = settings.ENV["sandbox"]
SandboxError = _native.SandboxError

# Folders of ComfyUI's tree a worker does not read: user settings, and other packs.
_COMFY_PRIVATE = {"user", "custom_nodes", "isolated_nodes"}
# Folder kinds of folder_paths that are not model or input folders.
_NOT_MODELS = {"custom_nodes"}


def _expand(paths: list[str]) -> list[str]:
    return [os.path.abspath(os.path.expanduser(p)) for p in paths]


def host_rules(
    pack: str,
    sandbox: Mapping[str, Any] | None,
    *,
    pack_dir: str,
    env_dir: str,
    comfyui_dir: str | None,
    folder_paths: Mapping[str, Any] | None,
) -> str | None:
    """The value of the ``sandbox`` setting for a pack's worker, or None when its sandbox is off.
    Raises :class:`SandboxError` naming the pack when this kernel cannot enforce it."""
    if not sandbox or not sandbox.get("enabled"):
        return None
    network = bool(sandbox.get("network", True))
    try:
        _native.sandbox_check(network)
    except SandboxError as e:
        raise SandboxError(f"pack {pack!r}: {e}") from None
    read = [pack_dir, env_dir, *_expand(list(sandbox.get("read") or ()))]
    listable = []
    write = _expand(list(sandbox.get("write") or ()))
    if comfyui_dir:
        listable.append(comfyui_dir)
        read += [
            os.path.join(comfyui_dir, e)
            for e in sorted(os.listdir(comfyui_dir))
            if e not in _COMFY_PRIVATE and not e.startswith(".")
        ]
    fp = folder_paths or {}
    for key in ("models_dir", "input_directory"):
        if fp.get(key):
            read.append(fp[key])
    for kind, (paths, _exts) in (fp.get("folder_names_and_paths") or {}).items():
        if kind not in _NOT_MODELS:
            read.extend(paths)
    for key in ("output_directory", "temp_directory"):
        if fp.get(key):
            write.append(fp[key])
    return json.dumps({"read": read, "list": listable, "write": write, "network": network})


def _worker_paths() -> tuple[list[str], list[str]]:
    """What this interpreter reads (its prefixes and ``sys.path``, not the working directory
    Python put first) and writes (its private temp dir, and a simulated card if one is set)."""
    cwd = os.getcwd()
    home = os.path.expanduser("~")
    read = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    read.update(p for p in sys.path if p and p not in (cwd, "/", home))
    nvml = settings.get().nvml_library
    if nvml:
        read.add(nvml)
    write = [tempfile.gettempdir()]
    write += settings.get().sim_gpu
    return sorted(read), write


def apply_from_env() -> dict[str, Any] | None:
    """In a worker: applies the sandbox the host asked for, if any; raises if it cannot."""
    spec = settings.get().sandbox
    if not spec:
        return None
    cfg = json.loads(spec)
    read, write = _worker_paths()
    report = _native.sandbox_apply(
        [*cfg["read"], *read], list(cfg.get("list", ())), [*cfg["write"], *write], cfg["network"]
    )
    log.info(
        "sandboxed (Landlock ABI %s%s%s)",
        report["abi"],
        "" if report["fully_enforced"] else ", partly enforced",
        ", no network" if report["network_blocked"] else "",
    )
    return report

"""What the ``comfy_env`` shim does (ADR 0025): comfy-env's layouts bound to comfy-airlock.

``register_nodes`` follows comfy-env's binder exactly: ``nodes/comfy-env.toml`` makes ``nodes/``
one isolated env; otherwise ``nodes/`` is imported here and, when that yields no nodes, each
``nodes/<sub>/`` package is an isolated env if it has a ``comfy-env.toml`` and is imported here
if it has none. Each env is a comfy-airlock pack named ``<pack>/<sub>`` (its worker, its
proxies, its row in ``/airlock/workers``). A failure is the env's, reported by name; it never
falls back to importing an isolated folder here.
"""

from __future__ import annotations

import fnmatch
import importlib
import logging
import os
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any

from comfy_airlock import settings
from comfy_airlock.compat import root_config

log = logging.getLogger("comfy_airlock")

Mappings = tuple[dict[str, type], dict[str, str]]


def _in_worker() -> bool:
    return settings.get().worker


def register_nodes(importing: tuple[str, str] | None, nodes_package: str) -> Mappings:
    """``importing``: ``(module name, folder)`` of the pack being imported
    (``compat.importing``)."""
    if importing is None:
        raise RuntimeError(
            "comfy_env.register_nodes() found no pack being imported: call it from the "
            f"__init__.py of a pack that has a {nodes_package}/ folder, while ComfyUI imports it"
        )
    caller_module, pkg_dir = importing
    root = root_config.read(pkg_dir)
    root_config.load_serializers(pkg_dir, root)
    if _in_worker():
        return {}, {}
    from comfy_airlock.host import loader

    folder = os.path.basename(pkg_dir)
    for line in root_config.peer_report(pkg_dir, root):
        log.warning("[comfy-airlock] pack %r: %s", folder, line)
    nodes_dir = os.path.join(pkg_dir, nodes_package)
    if not os.path.isdir(nodes_dir):
        log.info("[comfy-airlock] pack %r: no %s/ folder", folder, nodes_package)
        return {}, {}
    mappings: dict[str, type] = {}
    display: dict[str, str] = {}
    failures: list[tuple[str, str]] = []

    def merge(m: Mappings) -> None:
        mappings.update(m[0])
        display.update(m[1])

    root_toml = os.path.join(nodes_dir, "comfy-env.toml")
    if os.path.isfile(root_toml):
        merge(loader.load_pack(pkg_dir, folder, config=root_toml))
    else:
        merge(_import_here(caller_module, nodes_package, failures, absent_ok=True))
        if not mappings:
            for sub in root_config.subpackages(nodes_dir):
                toml = os.path.join(nodes_dir, sub, "comfy-env.toml")
                if os.path.isfile(toml):
                    merge(loader.load_pack(pkg_dir, f"{folder}/{sub}", config=toml))
                else:
                    merge(_import_here(caller_module, f"{nodes_package}.{sub}", failures))
    loader._register_routes()
    for where, tb in failures:
        log.error("[comfy-airlock] pack %r: importing %s failed:\n%s", folder, where, tb)
    if failures and not mappings:
        raise ImportError(
            f"[comfy-airlock] {folder}: all of its in-process node folders failed to import "
            f"(first: {failures[0][0]})"
        )
    return mappings, display


def _import_here(
    package: str | None, module: str, failures: list[tuple[str, str]], absent_ok: bool = False
) -> Mappings:
    """A folder without a comfy-env.toml: imported in ComfyUI's process, as comfy-env does."""
    try:
        mod = importlib.import_module(f".{module}", package=package)
    except ModuleNotFoundError as e:
        if absent_ok and e.name in (f"{package}.{module}", module):
            return {}, {}
        failures.append((module, traceback.format_exc()))
        return {}, {}
    except Exception:
        failures.append((module, traceback.format_exc()))
        return {}, {}
    return (
        dict(getattr(mod, "NODE_CLASS_MAPPINGS", {}) or {}),
        dict(getattr(mod, "NODE_DISPLAY_NAME_MAPPINGS", {}) or {}),
    )


def _configs(pkg_dir: str) -> list[str]:
    from comfy_airlock import env

    return env.comfy_env_configs(pkg_dir)


def _comfyui_dir(pkg_dir: str) -> str | None:
    from comfy_airlock.host import comfy_state

    found = comfy_state.comfyui_dir() or os.environ.get("COMFYUI_DIR")
    if found:
        return found
    # custom_nodes/<pack> of a ComfyUI tree (install.py runs outside ComfyUI).
    tree = Path(pkg_dir).resolve().parent.parent
    return str(tree) if (tree / "main.py").is_file() else None


def _env_name(pkg_dir: str, config: str) -> str:
    folder = os.path.basename(pkg_dir)
    sub = os.path.basename(os.path.dirname(config))
    return folder if sub == "nodes" else f"{folder}/{sub}"


def _envs(pkg_dir: str) -> list[tuple[str, str]]:
    """``(name, config)`` for each ``comfy-env.toml`` of the pack."""
    return [(_env_name(pkg_dir, c), c) for c in _configs(pkg_dir)]


def _ensure(pkg_dir: str, config: str, *, build: bool, progress: Any = None) -> Any:
    from comfy_airlock import env

    return env.ensure_env(
        pkg_dir,
        comfyui_dir=_comfyui_dir(pkg_dir),
        host_python=sys.executable,
        build=build,
        progress=progress,
        config=config,
    )


_SETUP_REPORTED: set[str] = set()


def _custom_node_packs() -> list[str]:
    """The folders in ComfyUI's ``custom_nodes`` folders (none outside ComfyUI)."""
    fp = sys.modules.get("folder_paths")
    roots = fp.get_folder_paths("custom_nodes") if fp is not None else []
    return sorted(
        e.path for root in roots if os.path.isdir(root) for e in os.scandir(root) if e.is_dir()
    )


def setup_env() -> None:
    if _in_worker():
        return
    for pkg_dir in _custom_node_packs():
        if pkg_dir not in _SETUP_REPORTED:
            _SETUP_REPORTED.add(pkg_dir)
            try:
                _report_envs(pkg_dir)
            except Exception as e:  # a report never stops ComfyUI's start
                log.error("[comfy-airlock] %s: %s", os.path.basename(pkg_dir), e)


def _report_envs(pkg_dir: str) -> None:
    from comfy_airlock import env

    for name, config in _envs(pkg_dir):
        try:
            info = _ensure(pkg_dir, config, build=False)
            log.info("[comfy-airlock] %s: [OK] environment %s", name, info["env_dir"])
        except env.EnvMissing as e:
            log.warning(
                "[comfy-airlock] %s: environment MISSING (%s); it is built when ComfyUI loads "
                "the pack, or run `airlock build`",
                name,
                str(e).splitlines()[0],
            )
        except Exception as e:
            log.error("[comfy-airlock] %s: %s", name, e)


def install(pkg_dir: str | None, log_callback: Any = None, dry_run: bool = False) -> bool:
    if not pkg_dir:
        raise RuntimeError("comfy_env.install() must be called from a pack's install.py")
    from comfy_airlock import env

    say = log_callback or (lambda line: print(f"[comfy-airlock] {line}", flush=True))
    for line in root_config.peer_report(pkg_dir, root_config.read(pkg_dir)):
        say(line)
    failed = []
    for name, config in _envs(pkg_dir):
        try:
            info = _ensure(pkg_dir, config, build=not dry_run, progress=say)
            say(f"{name}: ready: {info['env_dir']}")
        except env.EnvMissing as e:
            say(f"{name}: would build: {str(e).splitlines()[0]}")
        except Exception as e:
            say(f"{name}: FAILED: {e}")
            failed.append(name)
    if failed:
        raise RuntimeError(f"comfy-airlock: environments not built: {', '.join(failed)}")
    return True


_DIRS = {
    "input": "get_input_directory",
    "output": "get_output_directory",
    "temp": "get_temp_directory",
    "user": "get_user_directory",
}


def _destination(caller_dir: Path, dst: Any) -> Path:
    p = Path(dst)
    if p.is_absolute():
        return p
    head, *rest = p.parts or ("",)
    fp = sys.modules.get("folder_paths")
    getter = getattr(fp, _DIRS.get(head, ""), None)
    if getter is not None:
        return Path(getter(), *rest)
    return caller_dir / p


def copy_files(base_dir: str | None, src: Any, dst: Any, pattern: str, overwrite: bool) -> int:
    """``base_dir``: where relative paths start (default: the working directory)."""
    caller_dir = Path(base_dir) if base_dir else Path.cwd()
    src_p = Path(src) if Path(src).is_absolute() else caller_dir / src
    if not src_p.exists():
        return 0
    dst_p = _destination(caller_dir, dst)
    copied = 0
    for f in src_p.glob(pattern):
        if not f.is_file() or not fnmatch.fnmatch(f.name, "*"):
            continue
        target = dst_p / f.relative_to(src_p)
        if overwrite or not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target)
            copied += 1
    return copied


def register_serializer(type_name: str, serialize: Any, deserialize: Any, tag: str | None) -> None:
    from comfy_airlock import values

    def same(value: Any) -> Any:
        return value  # nested values cross by themselves

    def decode(payload: Any) -> Any:
        return payload if deserialize is None else deserialize(payload, same)

    values.register_codec_by_class_name(
        tag or type_name, type_name, lambda obj: serialize(obj, same), decode
    )

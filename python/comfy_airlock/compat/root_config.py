"""A comfy-env pack's ``comfy-env-root.toml``: ``[types]`` (custom sockets, whose codecs live
in ``<pack>/serialization.py``) and ``[node_packs]`` (peer packs comfy-env clones; we only
report them: nothing is cloned or installed silently). Sections comfy-env removed
(``[node_reqs]``, ``[apt]``, ``[brew]``, ``[cuda]``) are reported the same way. Also what the
host does for a comfy-env pack found in ``isolated_nodes/`` (:func:`prepare_managed`): it sits
here, below ``comfy_airlock.host``, because the loader calls it."""

from __future__ import annotations

import importlib.util
import logging
import os
from typing import Any

log = logging.getLogger("comfy_airlock")

FILE = "comfy-env-root.toml"
_LOADED: set[str] = set()


def _toml() -> Any:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib


def read(pkg_dir: str) -> dict[str, Any]:
    """The pack's root config ({} when it has none); a broken one is the pack's error."""
    path = os.path.join(pkg_dir, FILE)
    if not os.path.isfile(path):
        return {}
    with open(path, "rb") as f:
        try:
            return _toml().load(f)
        except Exception as e:
            raise RuntimeError(f"{os.path.basename(pkg_dir)}: {path} cannot be read: {e}") from e


def peer_report(pkg_dir: str, root: dict[str, Any]) -> list[str]:
    """One line per peer pack the root config asks for that is not beside this one."""
    lines = []
    custom_nodes = os.path.dirname(pkg_dir)
    for section in ("node_packs", "node_reqs"):
        for name, spec in (root.get(section) or {}).items():
            if os.path.isdir(os.path.join(custom_nodes, name)):
                continue
            where = spec if isinstance(spec, str) else spec.get("github") or spec.get("registry")
            lines.append(
                f"comfy-env-root.toml [{section}] asks for the pack {name} ({where}), which is "
                "not installed; comfy-airlock does not clone packs: install it with "
                "ComfyUI-Manager if you want it"
            )
    for section in ("apt", "brew", "cuda", "settings"):
        if section in root:
            lines.append(
                f"comfy-env-root.toml [{section}] is a section comfy-env removed; it is not used"
            )
    return lines


def load_serializers(pkg_dir: str, root: dict[str, Any]) -> None:
    """``[types]`` with "custom" sockets: ``<pack>/serialization.py``, loaded by file path
    (once per process), must register a serializer, or the pack fails by name."""
    custom = sorted(k for k, v in (root.get("types") or {}).items() if v == "custom")
    if not custom:
        return
    path = os.path.join(pkg_dir, "serialization.py")
    if path in _LOADED:
        return
    name = os.path.basename(pkg_dir)
    if not os.path.isfile(path):
        raise ValueError(
            f"{name}: [types] declares custom socket(s) {custom} but {path} is missing"
        )
    from comfy_airlock import values

    before = values.name_codec_count()
    spec = importlib.util.spec_from_file_location(f"_airlock_serializers_{abs(hash(path))}", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{name}: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _LOADED.add(path)
    if values.name_codec_count() == before:
        raise ValueError(
            f"{name}: [types] declares custom socket(s) {custom} but serialization.py "
            "registered no serializer"
        )


def unbound_folders(pack_dir: str) -> list[str]:
    """``nodes/<sub>`` packages of a comfy-env pack that have no ``comfy-env.toml`` (comfy-env
    imports them in ComfyUI's process; from ``isolated_nodes/`` nothing is)."""
    nodes_dir = os.path.join(pack_dir, "nodes")
    if not os.path.isdir(nodes_dir) or os.path.isfile(os.path.join(nodes_dir, "comfy-env.toml")):
        return []
    return [
        f"nodes/{sub}"
        for sub in subpackages(nodes_dir)
        if not os.path.isfile(os.path.join(nodes_dir, sub, "comfy-env.toml"))
    ]


_PREPARED: set[str] = set()


def prepare_managed(discovered: dict[str, Any]) -> str | None:
    """A comfy-env env found in ``isolated_nodes/``, whose root ``__init__.py`` ComfyUI never
    imports: what ``register_nodes`` would do there, once per pack (its ``[types]`` codecs in
    ComfyUI, its missing peers and its folders without a ``comfy-env.toml`` reported). Returns
    why the pack cannot load, or None."""
    config = discovered.get("config") or {}
    if config.get("format") != "comfy-env.toml":
        return None
    pack_dir = discovered["dir"]
    pack = os.path.basename(pack_dir)
    try:
        root = read(pack_dir)
        load_serializers(pack_dir, root)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    if pack in _PREPARED:
        return None
    _PREPARED.add(pack)
    for line in peer_report(pack_dir, root):
        log.warning("[comfy-airlock] pack %r: %s", pack, line)
    names = unbound_folders(pack_dir)
    if names:
        log.warning(
            "[comfy-airlock] pack %r: %s not loaded (no comfy-env.toml; comfy-env imports such "
            "folders in ComfyUI's process, which a pack in isolated_nodes/ never is)",
            pack,
            ", ".join(names),
        )
    return None


def subpackages(nodes_dir: str) -> list[str]:
    return sorted(
        d
        for d in os.listdir(nodes_dir)
        if not d.startswith(("_", "."))
        and os.path.isfile(os.path.join(nodes_dir, d, "__init__.py"))
    )

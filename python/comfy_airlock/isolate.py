"""``airlock isolate PACK``: turns a pack in ``custom_nodes/`` into an isolated one, and
``airlock isolate --undo PACK`` turns it back.

Isolating moves the pack to ``isolated_nodes/`` (ComfyUI never imports that folder; the
custom node does, through workers), writes its ``airlock.toml`` from its ``requirements.txt``
and ``pyproject.toml`` (unless it has a config of its own), builds its environment and reads
its nodes in its worker, as ComfyUI will. Any failure puts every file back where it was.

What ``isolate`` changed is recorded in the pack (``.airlock-isolate.json``) so that ``--undo``
restores exactly the prior state: it removes the ``airlock.toml`` it wrote (kept, renamed, when
the user edited it since) and never one the pack had.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from comfy_airlock import env as airlock_env
from comfy_airlock import install, isolated_toml, pack_requirements, places, undeclared
from comfy_airlock.isolated_toml import AIRLOCK_TOML, MARKER

CONFIGS = ("airlock.toml", "comfy-env.toml", "nodes/comfy-env.toml")
# Undeclared imports added to the airlock.toml isolate wrote, at most, before it gives up (each
# costs a build and a scan; real packs were seen missing one or two).
MAX_ADDED = 8


class IsolateError(RuntimeError):
    """Why a pack could not be isolated or given back (the message names the pack)."""


def _existing(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _pack_name(arg: str) -> str:
    name = Path(arg.rstrip("/")).name
    if not name or name in (".", ".."):
        raise IsolateError(f"{arg!r} is not a pack name")
    return name


def _listing(folder: Path) -> str:
    names = [
        d.name
        for d in sorted(folder.iterdir())
        if d.is_dir() and not d.name.startswith((".", "__")) and not install.is_our_custom_node(d)
    ]
    return ", ".join(names) if names else "none"


def check_isolatable(place: places.Place, name: str) -> tuple[Path, Path]:
    """(source, destination) of the pack ``name``, or :class:`IsolateError` saying why not."""
    src, dst = place.custom_nodes / name, place.isolated_nodes / name
    if _existing(dst):
        both = f", and custom_nodes/{name} exists too: remove one" if _existing(src) else ""
        raise IsolateError(f"{name}: already isolated: {dst} exists{both}")
    if not _existing(src):
        known = _listing(place.custom_nodes) if place.custom_nodes.is_dir() else "none"
        raise IsolateError(f"{name}: no such pack in {place.custom_nodes} (packs there: {known})")
    if not src.is_dir():
        raise IsolateError(
            f"{name}: {src} is a single file; only a pack folder can be isolated (put it in a "
            "folder with an __init__.py that imports it)"
        )
    if install.is_our_custom_node(src):
        raise IsolateError(f"{name}: this is comfy-airlock's own custom node, not a pack")
    return src, dst


def _write_config(src: Path, name: str) -> tuple[pack_requirements.PackNeeds | None, list[str]]:
    """Writes the pack's ``airlock.toml`` unless it has a config; returns (what it asks for,
    None when the pack's own config is used; lines to print)."""
    own = [c for c in CONFIGS if (src / c).is_file()]
    if own:
        return None, [f"{name}: uses its own {own[0]}"]
    try:
        needs = pack_requirements.read_pack_needs(src)
    except pack_requirements.RequirementsError as e:
        raise IsolateError(f"{name}: {e}") from e
    isolated_toml.write_toml(src, name, needs, {})
    deps = ", ".join(needs.dependencies) or "none"
    sources = isolated_toml.sources(needs)
    lines = [f"{name}: wrote {AIRLOCK_TOML} from {sources}: dependencies: {deps}"]
    lines += [f"{name}: note: {n}" for n in needs.notes]
    return needs, lines


def _move(src: Path, dst: Path) -> None:
    # shutil.move renames (a link stays a link) and copies only across filesystems.
    shutil.move(str(src), str(dst))


class _Undo:
    """What to put back, newest first, if a later step fails."""

    def __init__(self) -> None:
        self.steps: list[Callable[[], None]] = []

    def __call__(self) -> None:
        for step in reversed(self.steps):
            with contextlib.suppress(OSError):
                step()


def _say(line: str) -> None:
    print(line, flush=True)


def _progress() -> Callable[[str], None] | None:
    # A terminal gets the core's spinner; a log gets its phase lines.
    return None if sys.stderr.isatty() else (lambda line: print(line, file=sys.stderr))


def _scan(name: str, dst: Path, info: Any, comfyui: Path | None) -> dict[str, Any]:
    from comfy_airlock.host.pack import IsolatedPack

    pack = IsolatedPack.from_env(name, str(dst), info, str(comfyui) if comfyui else None)
    try:
        pack.sandbox_rules(str(comfyui) if comfyui else None)
        return pack.scan()
    finally:
        pack.close()


def _nodes_lines(name: str, meta: dict[str, Any], info: Any) -> list[str]:
    nodes = meta.get("nodes") or {}
    lines = [f"{name}: {len(nodes)} node(s), running in Python {info['python_version']}:"]
    for node_id, m in sorted(nodes.items()):
        shown = m.get("display_name")
        lines.append(f"  {node_id}" + (f" ({shown})" if shown and shown != node_id else ""))
    from comfy_airlock.host.scan_cache import choices_note, patches_note

    if meta.get("comfy_patches"):
        lines.append(f"note: {patches_note(name, meta['comfy_patches'])}")
    if meta.get("comfy_choices"):
        lines.append(f"note: {choices_note(name, meta['comfy_choices'])}")
    return lines


def isolate(place: places.Place, name: str, say: Callable[[str], None] = _say) -> None:
    """Isolates the pack ``name``; raises :class:`IsolateError` with everything put back."""
    src, dst = check_isolatable(place, name)
    undo = _Undo()
    try:
        made_folder = not place.isolated_nodes.exists()
        if made_folder:
            place.isolated_nodes.mkdir()
            undo.steps.append(place.isolated_nodes.rmdir)
        needs, lines = _write_config(src, name)
        written = isolated_toml.sha(src / AIRLOCK_TOML) if needs is not None else None
        if written:
            undo.steps.append((src / AIRLOCK_TOML).unlink)
        for line in lines:
            say(line)
        try:
            airlock_env.pack_config(src)
        except airlock_env.ConfigError as e:
            raise IsolateError(str(e)) from e
        marker = {"airlock_toml_sha256": written, "made_isolated_nodes": made_folder, "added": {}}
        isolated_toml.write_marker(src, marker)
        undo.steps.append((src / MARKER).unlink)
        _move(src, dst)
        undo.steps.append(lambda: _move(dst, src))
        say(f"{name}: moved to {dst}")
        info, meta = _build_and_scan(name, src, dst, place, needs, marker, say)
    except BaseException:
        undo()
        raise
    _done(name, meta, info, place, say, f"{name} now runs in its own process")


def isolate_group(
    place: places.Place, group: str, names: list[str], say: Callable[[str], None] = _say
) -> None:
    """Isolates the packs ``names`` together as the group ``group`` (ADR 0054): one folder in
    ``isolated_nodes/`` that holds them, one ``airlock.toml`` that names them (``packs``) and
    asks for all their requirements, one environment, one worker. Raises
    :class:`IsolateError` with everything put back."""
    if len(names) < 2:
        raise IsolateError(f"{group}: a group is two packs or more (one is isolated alone)")
    if len(set(names)) != len(names):
        raise IsolateError(f"{group}: a pack is named twice")
    dst = place.isolated_nodes / group
    if _existing(dst):
        raise IsolateError(f"{group}: {dst} exists already")
    srcs = [check_isolatable(place, n)[0] for n in names]
    for n, src in zip(names, srcs, strict=True):
        own = [c for c in CONFIGS if (src / c).is_file()]
        if own:
            raise IsolateError(
                f"{n}: it has its own {own[0]}, and a group has one config, its folder's: "
                "make the group by hand (docs/user-guide.md, section 2)"
            )
    needs = _group_needs(names, srcs)
    undo = _Undo()
    try:
        made_folder = not place.isolated_nodes.exists()
        if made_folder:
            place.isolated_nodes.mkdir()
            undo.steps.append(place.isolated_nodes.rmdir)
        dst.mkdir()
        undo.steps.append(dst.rmdir)
        for n, src in zip(names, srcs, strict=True):
            _move(src, dst / n)
            undo.steps.append(lambda src=src, moved=dst / n: _move(moved, src))
            say(f"{n}: moved to {dst / n}")
        written = isolated_toml.write_toml(dst, group, needs, {})
        undo.steps.append((dst / AIRLOCK_TOML).unlink)
        deps = ", ".join(needs.dependencies) or "none"
        say(
            f"{group}: wrote {AIRLOCK_TOML} from {isolated_toml.sources(needs)}: dependencies: {deps}"
        )
        for note in needs.notes:
            say(f"{group}: note: {note}")
        try:
            airlock_env.pack_config(dst)
        except airlock_env.ConfigError as e:
            raise IsolateError(str(e)) from e
        marker = {"airlock_toml_sha256": written, "made_isolated_nodes": made_folder, "added": {}}
        marker["group"] = names
        isolated_toml.write_marker(dst, marker)
        undo.steps.append((dst / MARKER).unlink)
        info, meta = _build_and_scan(group, dst, dst, place, needs, marker, say)
    except BaseException:
        undo()
        raise
    together = ", ".join(names)
    _done(group, meta, info, place, say, f"{together} now run in one process of their own")


def _done(
    name: str,
    meta: dict[str, Any],
    info: Any,
    place: places.Place,
    say: Callable[[str], None],
    runs: str,
) -> None:
    """What an isolation that succeeded prints: the nodes, what is missing, the restart."""
    for line in _nodes_lines(name, meta, info):
        say(line)
    went_without = meta.get("went_without") or []
    providers = {m: undeclared.provider_here(m) for m in went_without}
    config = airlock_env.config_file(place.isolated_nodes / name)
    note = undeclared.went_without_note(name, providers, str(config))
    if note:
        say(f"note: {note}")
    if install.find_custom_node(place.custom_nodes) is None:
        say("note: comfy-airlock's custom node is not in custom_nodes/: run `airlock install`")
    say(f"Restart ComfyUI: {runs}, out of ComfyUI's.")


def _group_needs(names: list[str], srcs: list[Path]) -> pack_requirements.PackNeeds:
    try:
        return isolated_toml.group_needs(names, srcs)
    except isolated_toml.GroupNeedsError as e:
        raise IsolateError(str(e)) from e


class MemberFailed(Exception):
    """A group's scan in which one of its packs failed to import (the others loaded)."""

    def __init__(self, member: str, failure: dict[str, Any]) -> None:
        super().__init__(
            f"its pack {member} failed to import: {failure.get('type')}: {failure.get('error')}"
        )
        self.member = member
        self.failure = failure


def _member_failure(meta: dict[str, Any]) -> None:
    """Raises :class:`MemberFailed` for the first member of a group that failed to import:
    isolating a group that loads without one of its packs is not done."""
    for member, m in (meta.get("members") or {}).items():
        if m.get("failed"):
            raise MemberFailed(member, m["failed"])


def _build_and_scan(
    name: str,
    src: Path,
    dst: Path,
    place: places.Place,
    needs: pack_requirements.PackNeeds | None,
    marker: dict[str, Any],
    say: Callable[[str], None],
) -> tuple[Any, dict[str, Any]]:
    """Builds the environment and reads the nodes in a worker. A pack that imports a module it
    does not declare, which ComfyUI's environment provides, gets that package added to the
    ``airlock.toml`` isolate wrote (``needs``; never to the pack's own config), pinned to the
    version found, or by name alone when the pin does not resolve with the pack's own needs
    (ADR 0049); so do the modules a failed import looked for and found nowhere (ADR 0050). An
    error names the config where it will be once the pack is put back (``src``)."""
    added: dict[str, str] = {}  # module -> the requirement added for it
    pinned: list[str] = []  # the modules whose requirements were just added with a version
    while True:
        try:
            info = _build(name, dst, place, say)
        except IsolateError:
            named = _by_name(pinned)
            if not named:
                raise
            tried, instead = ", ".join(added[m] for m in named), ", ".join(named.values())
            say(f"{name}: {tried} does not resolve with the pack's needs; trying {instead}")
            added.update(named)
            pinned = []
            _record(name, dst, needs, added, marker)
            continue
        pinned = []
        try:
            meta = _scan(name, dst, info, place.comfyui)
            _member_failure(meta)
            return info, meta
        except Exception as e:
            found = _undeclared(e, added) if needs is not None else {}
            if not found or len(added) + len(found) > MAX_ADDED:
                raise _scan_error(name, src, dst, e) from e
        for module, provider in found.items():
            say(
                f"{name}: imports {module} without declaring it; ComfyUI's environment has it "
                f"({provider.distribution} {provider.version}): added {provider.requirement} "
                f"to {AIRLOCK_TOML}, building again"
            )
            added[module] = str(provider.requirement)
        pinned = list(found)
        _record(name, dst, needs, added, marker)


def _undeclared(e: BaseException, added: dict[str, str]) -> dict[str, undeclared.Provider]:
    """The modules the failed scan ``e`` shows the pack imports undeclared, which ComfyUI's
    environment provides and were not added already: the one its error names (ADR 0049), else
    the ones its import looked for and found nowhere (ADR 0050)."""
    if isinstance(e, MemberFailed):
        module = undeclared.missing_module_of_failure(e.failure)
        looked_for = undeclared.looked_for_in(e.failure.get("traceback"))
    else:
        module, looked_for = undeclared.missing_module_of(e), undeclared.looked_for_of(e)
    names = [module] if module else looked_for
    found = {}
    for m in names:
        provider = undeclared.provider_here(m)
        if provider and provider.requirement and m not in added and m not in undeclared.NEVER_ADDED:
            found[m] = provider
    return found


def _by_name(modules: list[str]) -> dict[str, str]:
    """The distributions of ``modules`` by name alone, for pins that did not resolve."""
    named = {}
    for m in modules:
        provider = undeclared.provider_here(m)
        if provider and provider.distribution:
            named[m] = provider.distribution
    return named


def _scan_error(name: str, src: Path, dst: Path, e: BaseException) -> IsolateError:
    """The error of a scan that failed, with what to add where (the config named where it will
    be once the pack is put back, ``src``)."""
    config = Path(airlock_env.config_file(dst))
    with contextlib.suppress(ValueError):
        config = src / config.relative_to(dst)
    if isinstance(e, MemberFailed):
        hint = undeclared.hint_of_failure(e.failure, str(config))
    else:
        hint = undeclared.hint_of(e, str(config))
    return IsolateError(
        f"{name}: its nodes could not be read in its worker: {e}" + (f"\n{hint}" if hint else "")
    )


def _record(
    name: str,
    dst: Path,
    needs: pack_requirements.PackNeeds | None,
    added: dict[str, str],
    marker: dict[str, Any],
) -> None:
    """Rewrites isolate's ``airlock.toml`` with ``added``, and the marker with its new hash, so
    that ``--undo`` still knows the file as isolate's own."""
    assert needs is not None
    marker["airlock_toml_sha256"] = isolated_toml.write_toml(dst, name, needs, added)
    marker["added"] = added
    isolated_toml.write_marker(dst, marker)


def _build(name: str, dst: Path, place: places.Place, say: Callable[[str], None]) -> Any:
    from comfy_airlock.cli import bundled_uv

    try:
        info = airlock_env.ensure_env(
            dst,
            comfyui_dir=place.comfyui,
            uv=bundled_uv(),
            host_python=sys.executable,
            progress=_progress(),
        )
    except airlock_env.EnvError as e:
        log = getattr(e, "log_path", None)
        raise IsolateError(f"{e}" + (f" (full log: {log})" if log else "")) from e
    how = "built" if info["built"] else "up to date"
    say(f"{name}: environment {how}: {info['env_dir']}")
    return info


def undo_isolate(place: places.Place, name: str, say: Callable[[str], None] = _say) -> None:
    """Moves the isolated pack ``name`` back to ``custom_nodes/`` as it was before."""
    src, dst = place.isolated_nodes / name, place.custom_nodes / name
    if not _existing(src):
        where = " (it is in custom_nodes/, not isolated)" if _existing(dst) else ""
        known = _listing(place.isolated_nodes) if place.isolated_nodes.is_dir() else "none"
        raise IsolateError(
            f"{name}: no such pack in {place.isolated_nodes}{where} (packs there: {known})"
        )
    if _existing(dst):
        raise IsolateError(f"{name}: {dst} exists already: move it away first")
    marker_path = src / MARKER
    try:
        marker = json.loads(marker_path.read_text()) if marker_path.is_file() else None
    except (OSError, ValueError) as e:
        raise IsolateError(f"{name}: {marker_path} cannot be read: {e}") from e
    if marker is not None and marker.get("group"):
        _undo_group(place, name, src, marker, say)
        return
    _move(src, dst)
    say(f"{name}: moved back to {dst}")
    if marker is None:
        say(f"{name}: it was not isolated by `airlock isolate`: its files are unchanged")
        return
    wrote = marker.get("airlock_toml_sha256")
    toml = dst / AIRLOCK_TOML
    if wrote and toml.is_file():
        if isolated_toml.sha(toml) == wrote:
            toml.unlink()
            say(f"{name}: removed the {AIRLOCK_TOML} `airlock isolate` wrote")
        else:
            kept = toml.with_name(AIRLOCK_TOML + ".edited")
            toml.rename(kept)
            say(f"{name}: you edited its {AIRLOCK_TOML}: kept as {kept.name}")
    (dst / MARKER).unlink(missing_ok=True)
    if marker.get("made_isolated_nodes"):
        with contextlib.suppress(OSError):  # only when empty: other packs stay isolated
            place.isolated_nodes.rmdir()
    say(f"Restart ComfyUI: it imports {name} into its own process again.")


def _undo_group(
    place: places.Place, name: str, src: Path, marker: dict[str, Any], say: Callable[[str], None]
) -> None:
    """Moves a group's packs back to ``custom_nodes/`` and removes the group's folder, or keeps
    it, with the ``airlock.toml`` in it, when that was edited."""
    members = [str(m) for m in marker["group"]]
    for m in members:
        if _existing(place.custom_nodes / m):
            raise IsolateError(
                f"{name}: {place.custom_nodes / m} exists already: move it away first"
            )
        if not _existing(src / m):
            raise IsolateError(f"{name}: its pack {m} is not in {src} any more")
    toml = src / AIRLOCK_TOML
    wrote = marker.get("airlock_toml_sha256")
    edited = toml.is_file() and wrote is not None and isolated_toml.sha(toml) != wrote
    for m in members:
        _move(src / m, place.custom_nodes / m)
        say(f"{m}: moved back to {place.custom_nodes / m}")
    (src / MARKER).unlink(missing_ok=True)
    if edited:
        say(f"{name}: you edited its {AIRLOCK_TOML}: kept, in {src}")
    else:
        toml.unlink(missing_ok=True)
        try:
            src.rmdir()
            say(
                f"{name}: removed the group's folder and the {AIRLOCK_TOML} `airlock isolate` wrote"
            )
        except OSError:
            say(f"{name}: {src} holds more than the group's packs: kept")
    if marker.get("made_isolated_nodes"):
        with contextlib.suppress(OSError):
            place.isolated_nodes.rmdir()
    say(f"Restart ComfyUI: it imports {', '.join(members)} into its own process again.")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="airlock isolate",
        description="Move a pack from custom_nodes/ to isolated_nodes/, write its airlock.toml "
        "from its requirements, build its environment and list its nodes.",
    )
    parser.add_argument(
        "packs",
        metavar="PACK",
        nargs="+",
        help="the pack's folder name in custom_nodes/ (several with --group)",
    )
    parser.add_argument(
        "--group",
        metavar="NAME",
        help="isolate the PACKs together, in one worker and one environment, as the group NAME "
        "(packs that call each other's code, such as Impact Pack and Inspire Pack)",
    )
    parser.add_argument(
        "--undo",
        action="store_true",
        help="move an isolated pack, or a group's packs, back to custom_nodes/",
    )
    places.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.group is None and len(args.packs) > 1:
        parser.error("several packs are isolated together with --group NAME")
    if args.undo and args.group is not None:
        parser.error("--undo takes the group's name as its PACK, without --group")
    try:
        place = places.resolve(args.comfyui, args.base)
        names = [_pack_name(p) for p in args.packs]
        if args.group is not None:
            isolate_group(place, _pack_name(args.group), names)
        else:
            (undo_isolate if args.undo else isolate)(place, names[0])
    except (places.PlaceError, IsolateError, OSError) as e:
        print(f"airlock isolate: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("airlock isolate: interrupted; the pack is where it was", file=sys.stderr)
        return 130
    return 0

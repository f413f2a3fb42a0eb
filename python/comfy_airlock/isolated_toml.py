"""The ``airlock.toml`` that ``airlock isolate`` writes for a pack from its requirements, the
record it keeps beside it (``.airlock-isolate.json``), and keeping that file in step when the
pack is updated (ADR 0059).

A pack isolated from ``custom_nodes/`` keeps being updated by its user (``git pull`` in its
folder); ComfyUI-Manager, which would install the new requirements natively, no longer sees it
in ``isolated_nodes/``. So at each start the file isolate wrote is made again from the pack's
requirements as they are now: when it asks for something else and the user never edited it,
it is rewritten (the environment is then resolved again, as for any change of the config) and
the log says what changed; when the user edited it, it is left as it is and the log names
what the pack now asks for that the file does not list.

The rule (:func:`changes`) is pure; the rest reads and writes the two files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path
from typing import Any, NamedTuple

from comfy_airlock import pack_requirements

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

MARKER = ".airlock-isolate.json"
AIRLOCK_TOML = "airlock.toml"
HEADER = (
    "Written by `airlock isolate` from {sources}.\n"
    "Edit it freely (docs/user-guide.md, section 4); `airlock isolate --undo {name}` removes it."
)
_ADDED_LINE = re.compile(r"^#   (.+) \(imported as ([A-Za-z_][A-Za-z0-9_.]*)\)$")


class GroupNeedsError(ValueError):
    """A group's members ask for what one environment cannot hold (the message names the
    member)."""


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sources(needs: pack_requirements.PackNeeds) -> str:
    return " and ".join(needs.sources) or "nothing (the pack lists no requirements)"


def toml_text(name: str, needs: pack_requirements.PackNeeds, added: dict[str, str]) -> str:
    """The ``airlock.toml`` asking for ``needs`` and, for each undeclared import, the
    requirement ``added`` for it (module -> requirement; the header says why each is there)."""
    header = HEADER.format(sources=sources(needs), name=name)
    if added:
        header += (
            "\nAlso added by `airlock isolate`: packages the pack imports without declaring "
            "them, at the\nversion ComfyUI's environment has (natively the pack imports them "
            "from there):\n"
        ) + "\n".join(f"  {req} (imported as {module})" for module, req in added.items())
    asked = dataclasses.replace(needs, dependencies=[*needs.dependencies])
    for requirement in added.values():
        asked.add(requirement)
    return pack_requirements.airlock_toml(asked, header)


def write_toml(
    pack: Path, name: str, needs: pack_requirements.PackNeeds, added: dict[str, str]
) -> str:
    """Writes :func:`toml_text` as the pack's ``airlock.toml``; returns its sha256."""
    path = pack / AIRLOCK_TOML
    # Bytes, not text: the file's hash is the text's on every system (no newline translation).
    path.write_bytes(toml_text(name, needs, added).encode("utf-8"))
    return sha(path)


def read_marker(pack: Path) -> dict[str, Any] | None:
    """The record ``isolate`` left in ``pack`` (None: none, or not a JSON object)."""
    try:
        marker = json.loads((pack / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def write_marker(pack: Path, marker: dict[str, Any]) -> None:
    (pack / MARKER).write_text(json.dumps(marker, indent=1) + "\n")


def group_needs(names: list[str], folders: list[Path]) -> pack_requirements.PackNeeds:
    """Every member's needs in member order, as ComfyUI-Manager installs each pack's into one
    environment natively; a relative find-links folder made relative to the group's folder."""
    group = pack_requirements.PackNeeds(packs=list(names))
    for n, folder in zip(names, folders, strict=True):
        try:
            needs = pack_requirements.read_pack_needs(folder)
        except pack_requirements.RequirementsError as e:
            raise GroupNeedsError(f"{n}: {e}") from e
        for dep in needs.dependencies:
            group.add(dep)
        if needs.index_url and group.index_url not in (None, needs.index_url):
            raise GroupNeedsError(
                f"{n}: its index URL {needs.index_url} is not the group's {group.index_url}: "
                "one environment has one index; make the group by hand"
            )
        group.index_url = group.index_url or needs.index_url
        group.extra_index_urls += [
            u for u in needs.extra_index_urls if u not in group.extra_index_urls
        ]
        for link in needs.find_links:
            link = link if "://" in link or Path(link).is_absolute() else f"{n}/{link}"
            if link not in group.find_links:
                group.find_links.append(link)
        group.sources += [f"{n}/{source}" for source in needs.sources]
        group.notes += [f"{n}: {note}" for note in needs.notes]
    return group


def changes(before: list[str], after: list[str]) -> tuple[list[str], list[str]]:
    """(asked for now and not before, asked for before and not now), each in its list's order;
    requirements compared as ``PackNeeds.lists`` does (spaces and case aside)."""
    a = pack_requirements.PackNeeds(dependencies=before)
    b = pack_requirements.PackNeeds(dependencies=after)
    return [r for r in after if not a.lists(r)], [r for r in before if not b.lists(r)]


def _added(marker: dict[str, Any], text: str) -> dict[str, str]:
    """What isolate added for undeclared imports: recorded since ADR 0059, else read back from
    the header of the file it wrote (which is unedited when this is asked)."""
    recorded = marker.get("added")
    if isinstance(recorded, dict):
        return {str(k): str(v) for k, v in recorded.items()}
    found = (_ADDED_LINE.match(line) for line in text.splitlines())
    return {m[2]: m[1] for m in found if m}


def _dependencies(text: str) -> list[str]:
    deps = tomllib.loads(text).get("dependencies")
    return [str(d) for d in deps] if isinstance(deps, list) else []


def _phrase(new: list[str], gone: list[str]) -> str:
    parts = [f"now also {', '.join(new)}"] if new else []
    parts += [f"no longer {', '.join(gone)}"] if gone else []
    return "; ".join(parts) or "other package sources"


class Refreshed(NamedTuple):
    """What :func:`refresh` did."""

    notices: list[str]
    """What to log, one line each."""
    rewritten: bool
    """The file was written again now (the environment is then resolved again, and a failure
    to resolve it is the update's, not the environment's that worked before)."""


_UNCHANGED = Refreshed([], False)


def refresh(pack: Path, name: str) -> Refreshed:
    """Brings the ``airlock.toml`` isolate wrote in ``pack`` in step with the pack's
    requirements as they are now (see the module docstring). A pack isolate did not write a
    file for (its own config, or no record) is left alone."""
    marker = read_marker(pack)
    wrote = marker.get("airlock_toml_sha256") if marker else None
    path = pack / AIRLOCK_TOML
    if not marker or not isinstance(wrote, str) or not path.is_file():
        return _UNCHANGED
    text = path.read_text(encoding="utf-8")
    members = marker.get("group")
    try:
        if members:
            names = [str(m) for m in members]
            needs = group_needs(names, [pack / m for m in names])
        else:
            needs = pack_requirements.read_pack_needs(pack)
    except (pack_requirements.RequirementsError, GroupNeedsError) as e:
        return Refreshed(
            [f"its requirements cannot be read again ({e}): {path} is used as it is"], False
        )
    edited = sha(path) != wrote
    added = _added(marker, "" if edited else text)
    now = toml_text(name, needs, added)
    if hashlib.sha256(now.encode()).hexdigest() == wrote:
        return _UNCHANGED  # asks for what it asked for when isolate wrote the file
    new, gone = changes(_dependencies(text), _dependencies(now))
    if edited:
        if not new:
            return _UNCHANGED
        return Refreshed(
            [
                f"its requirements ask for {', '.join(new)}, which {path} does not list; you "
                "edited that file since `airlock isolate` wrote it, so it is left as it is: "
                "add them there if the pack needs them"
            ],
            False,
        )
    marker["airlock_toml_sha256"] = write_toml(pack, name, needs, added)
    marker["added"] = added
    write_marker(pack, marker)
    if tomllib.loads(now) == tomllib.loads(text):
        # The same requirements, written by another version of isolate: resolved as before.
        return _UNCHANGED
    return Refreshed(
        [
            f"its requirements changed since `airlock isolate` wrote {path} "
            f"({_phrase(new, gone)}): the file is written again from them and the environment "
            "resolved again"
        ],
        True,
    )


def refresh_before_env(pack: Path, name: str) -> Refreshed:
    """:func:`refresh`, for a start or a build that goes on whatever it finds: an unreadable
    record or file is used as it is, and said."""
    try:
        return refresh(pack, name)
    except (OSError, ValueError) as e:
        return Refreshed(
            [f"its airlock.toml could not be compared with its requirements: {e}"], False
        )

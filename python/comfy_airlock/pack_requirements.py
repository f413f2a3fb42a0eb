"""What a pack made for ``custom_nodes/`` says it needs, read as its installer reads it: its
``requirements.txt`` (``-r`` includes and index options too), which is what ComfyUI-Manager
installs (``pip install -r requirements.txt``), or, for a pack without one, its
``pyproject.toml``'s ``[project] dependencies`` (the registry's metadata). Reading only;
``airlock isolate`` writes the result into the pack's ``airlock.toml``, where the user can read
and edit it.

Where both exist, the ``pyproject.toml`` dependencies the requirements file does not list are
named in a note and left out: natively nothing installs them, and they are not always
installable (comfy_mtb lists ``requirements-parserx``, which no index has).

What cannot be carried into ``airlock.toml`` (editable installs, constraint files, local paths)
is an error naming the file and the line, never silently dropped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: the same parser, from PyPI (a dependency there)
    import tomli as tomllib  # type: ignore[no-redef]

REQUIREMENTS_TXT = "requirements.txt"
PYPROJECT_TOML = "pyproject.toml"

# pip options that only tune how pip installs (uv decides that itself): dropped, with a note.
_IGNORED = {"--prefer-binary", "--trusted-host", "--pre", "--no-cache-dir", "--upgrade", "-U"}
_HASH = re.compile(r"\s+--hash[= ]\S+")


class RequirementsError(ValueError):
    """A requirement file says something ``airlock.toml`` cannot hold (the message names the
    file, the line and what to do)."""


@dataclass
class PackNeeds:
    """The dependencies and package sources of a pack, and the files they came from."""

    dependencies: list[str] = field(default_factory=list)
    index_url: str | None = None
    extra_index_urls: list[str] = field(default_factory=list)
    find_links: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: A group's packs (``packs``, ADR 0054); empty for one pack.
    packs: list[str] = field(default_factory=list)

    def lists(self, requirement: str) -> bool:
        """Whether ``requirement`` is already here (spaces and case aside)."""
        key = re.sub(r"\s+", "", requirement).lower()
        return any(re.sub(r"\s+", "", d).lower() == key for d in self.dependencies)

    def add(self, requirement: str) -> None:
        if not self.lists(requirement):
            self.dependencies.append(requirement)


def read_pack_needs(pack_dir: Path) -> PackNeeds:
    """The needs of the pack in ``pack_dir``: its ``requirements.txt`` when it has one, else
    its ``pyproject.toml`` dependencies."""
    needs = PackNeeds()
    req = pack_dir / REQUIREMENTS_TXT
    pyproject = pack_dir / PYPROJECT_TOML
    declared = _pyproject_dependencies(pyproject) if pyproject.is_file() else []
    if req.is_file():
        _read_requirements(req, pack_dir, needs, seen=set())
        extra = [d for d in declared if not needs.lists(d)]
        if extra:
            needs.notes.append(
                f"{PYPROJECT_TOML} also declares {', '.join(extra)}: left out, as ComfyUI-Manager "
                f"installs {REQUIREMENTS_TXT} only (add them to airlock.toml if the pack needs them)"
            )
        return needs
    for dep in declared:
        needs.add(dep)
    if pyproject.is_file():
        needs.sources.append(PYPROJECT_TOML)
    return needs


def _pyproject_dependencies(path: Path) -> list[str]:
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise RequirementsError(f"{path.name}: cannot be read: {e}") from e
    deps = (doc.get("project") or {}).get("dependencies") or []
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise RequirementsError(f"{path.name}: [project] dependencies must be a list of strings")
    return [d.strip() for d in deps if d.strip()]


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(line number, text) with comments removed and ``\\`` continuations joined."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for no, raw in enumerate(text.splitlines(), 1):
        if not pending:
            start = no
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            out.append((start, line))
    if pending.strip():
        out.append((start, pending.strip()))
    return out


def _option(line: str) -> tuple[str, str | None]:
    """``-r x``, ``-rx``, ``--requirement=x``, ``--requirement x`` -> (option, value)."""
    if line.startswith("--"):
        name, _, value = line.partition("=") if "=" in line.split()[0] else line.partition(" ")
        return name.strip(), value.strip() or None
    return line[:2], line[2:].strip() or None


def _read_requirements(path: Path, pack_dir: Path, needs: PackNeeds, seen: set[Path]) -> None:
    real = path.resolve()
    if real in seen:
        return
    seen.add(real)
    rel = _rel(path, pack_dir)
    needs.sources.append(rel)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise RequirementsError(f"{rel}: cannot be read: {e}") from e
    for no, line in _logical_lines(text):
        where = f"{rel}, line {no}"
        if not line.startswith("-"):
            needs.add(_requirement(line, where))
            continue
        opt, value = _option(line)
        if opt in ("-r", "--requirement") and value:
            _read_requirements(path.parent / value, pack_dir, needs, seen)
        elif opt in ("-i", "--index-url") and value:
            needs.index_url = value
        elif opt == "--extra-index-url" and value:
            if value not in needs.extra_index_urls:
                needs.extra_index_urls.append(value)
        elif opt in ("-f", "--find-links") and value:
            needs.find_links.append(_find_links(value, path.parent, pack_dir, where))
        elif opt in _IGNORED:
            needs.notes.append(f"{where}: {opt} is pip's own option, not needed by uv: left out")
        elif opt in ("-e", "--editable"):
            raise RequirementsError(
                f"{where}: an editable install ({line}) cannot be carried into an isolated "
                "environment; list the package by name in airlock.toml instead"
            )
        else:
            raise RequirementsError(
                f"{where}: the option {opt!r} cannot be carried into airlock.toml; remove it "
                "from the file, or write the pack's airlock.toml yourself (see the user guide)"
            )


def _requirement(line: str, where: str) -> str:
    req = _HASH.sub("", line).strip()
    if req.startswith((".", "/", "~")) or req.startswith("file:"):
        raise RequirementsError(
            f"{where}: {req!r} is a local path; put the wheel's folder in airlock.toml "
            "find-links and require the package by name"
        )
    return req


def _find_links(value: str, file_dir: Path, pack_dir: Path, where: str) -> str:
    if "://" in value:
        return value
    target = (file_dir / value).resolve()
    try:
        return str(target.relative_to(pack_dir.resolve()))
    except ValueError:
        raise RequirementsError(
            f"{where}: find-links folder {value!r} is outside the pack; it would not move with it"
        ) from None


def _rel(path: Path, pack_dir: Path) -> str:
    try:
        return str(path.relative_to(pack_dir))
    except ValueError:
        return str(path)


def _toml_list(key: str, values: list[str]) -> str:
    if not values:
        return f"{key} = []\n"
    items = "".join(f"    {json.dumps(v, ensure_ascii=False)},\n" for v in values)
    return f"{key} = [\n{items}]\n"


def airlock_toml(needs: PackNeeds, header: str) -> str:
    """The ``airlock.toml`` text that asks for ``needs`` (``header`` is its opening comment)."""
    text = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    if needs.packs:
        text += _toml_list("packs", needs.packs)
    text += _toml_list("dependencies", needs.dependencies)
    if needs.index_url:
        text += f"index-url = {json.dumps(needs.index_url, ensure_ascii=False)}\n"
    if needs.extra_index_urls:
        text += _toml_list("extra-index-urls", needs.extra_index_urls)
    if needs.find_links:
        text += _toml_list("find-links", needs.find_links)
    return text

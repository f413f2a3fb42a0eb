"""``airlock install``: puts comfy-airlock's custom node (shipped inside this package) into an
existing ComfyUI as ``custom_nodes/comfy-airlock`` and creates ``isolated_nodes/`` beside it.

The custom node is copied, as ComfyUI-Manager would leave a pack: ComfyUI imports it from
there, and it imports ``comfy_airlock`` from the Python that runs ComfyUI (the one this command
runs in). Running it again updates the copy; a folder of that name that is not ours is left
alone, with an error.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from comfy_airlock import places

FOLDER = "comfy-airlock"
# Package data (a checkout's top-level custom_node/ is a link to this folder).
SOURCE = Path(__file__).resolve().parent / "custom_node"


class InstallError(RuntimeError):
    """The custom node could not be put in place (the message says why and what to do)."""


def is_our_custom_node(path: Path) -> bool:
    """Whether ``path`` is comfy-airlock's custom node (any version): the rule discovery uses."""
    try:
        return "comfy_airlock.host" in (path / "__init__.py").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False


def find_custom_node(custom_nodes: Path) -> Path | None:
    """comfy-airlock's custom node in ``custom_nodes``, under any folder name."""
    if not custom_nodes.is_dir():
        return None
    for d in sorted(custom_nodes.iterdir()):
        if d.is_dir() and not d.name.endswith(".disabled") and is_our_custom_node(d):
            return d
    return None


def _copy_into(dst: Path) -> str:
    """Copies the custom node to ``dst`` (replacing our older copy there); says what it did."""
    if dst.is_symlink():
        return f"{dst} links to {dst.resolve()}: left as it is"
    if dst.exists() and not is_our_custom_node(dst):
        raise InstallError(
            f"{dst} exists and is not comfy-airlock's custom node: move it away, then run "
            "`airlock install` again"
        )
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    tmp = Path(tempfile.mkdtemp(prefix=f".{FOLDER}-", dir=dst.parent))
    try:
        staged = tmp / FOLDER
        shutil.copytree(SOURCE, staged, ignore=ignore)
        old = None
        if dst.exists():
            old = tmp / "old"
            dst.rename(old)
        staged.rename(dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return f"{dst}: {'updated' if old else 'installed'}"


def install(place: places.Place) -> list[str]:
    """Installs into ``place``; returns the lines to print."""
    if not (SOURCE / "__init__.py").is_file():
        raise InstallError(f"this comfy-airlock has no custom node at {SOURCE}: reinstall it")
    custom_nodes = place.custom_nodes
    if not custom_nodes.is_dir():
        if not (place.base / "main.py").is_file():
            raise InstallError(
                f"{place.base} has no custom_nodes/ and no main.py: is it ComfyUI's folder? "
                "Pass --comfyui DIR"
            )
        custom_nodes.mkdir()
    other = find_custom_node(custom_nodes)
    if other is not None and other.name != FOLDER:
        raise InstallError(
            f"comfy-airlock's custom node is already in {other}: remove that folder first, "
            "or ComfyUI would load it twice"
        )
    lines = [_copy_into(custom_nodes / FOLDER)]
    made = not place.isolated_nodes.exists()
    place.isolated_nodes.mkdir(exist_ok=True)
    lines.append(f"{place.isolated_nodes}: {'created' if made else 'already there'}")
    from comfy_airlock import compat

    pth = compat.install_pth()
    real = compat.real_comfy_env()
    lines.append(
        f"{pth}: comfy_env for comfy-env packs"
        + (f" (a real comfy-env is installed at {real} and is used instead)" if real else "")
    )
    where = f" --comfyui {place.comfyui}" if place.comfyui else ""
    if place.comfyui and place.base != place.comfyui:
        where += f" --base {place.base}"
    lines += [
        "",
        "Next:",
        f"  airlock isolate PACK{where}",
        "      moves a pack from custom_nodes/ into isolated_nodes/ and builds its environment",
        f"  {sys.executable} main.py",
        "      starts ComfyUI with this Python (comfy-airlock is installed in it)",
    ]
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="airlock install",
        description="Put comfy-airlock's custom node into ComfyUI (custom_nodes/comfy-airlock) "
        "and create isolated_nodes/.",
    )
    places.add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        place = places.resolve(args.comfyui, args.base)
        lines = install(place)
    except (places.PlaceError, InstallError, OSError) as e:
        print(f"airlock install: {e}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0

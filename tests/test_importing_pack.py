"""Which pack is being imported, without reading a frame (ADR 0033): the rule alone, then in a
real interpreter that loads packs as ComfyUI's ``load_custom_node`` does."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from comfy_airlock.compat.importing import newest_importing


def _is_pack(folder: str) -> bool:
    return os.path.basename(folder).startswith("Pack")


def test_the_newest_top_level_package_without_mappings_whose_folder_is_a_pack():
    modules = [
        ("os", "/usr/lib/os.py", False),
        ("PackA", "/c/PackA/__init__.py", True),  # imported already: it has its mappings
        ("PackB", "/c/PackB/__init__.py", False),  # failed earlier, left in sys.modules
        ("PackC", "/c/PackC/__init__.py", False),  # the one being imported
        ("PackC.nodes", "/c/PackC/nodes/__init__.py", False),  # inside it
        ("numpy", "/site/numpy/__init__.py", False),  # imported by it: not a pack
        ("PackD_helper", "/c/PackD_helper/helper.py", False),  # not a package
    ]
    assert newest_importing(modules, _is_pack) == ("PackC", "/c/PackC")
    assert newest_importing(modules[:3], _is_pack) == ("PackB", "/c/PackB")
    assert newest_importing(modules[:2], _is_pack) is None


def test_a_submodule_is_skipped_only_while_its_parent_is_loaded():
    # A dotted folder name ComfyUI imports as a top-level module ("my.pack") has no parent.
    assert newest_importing([("Pack.v2", "/c/Pack.v2/__init__.py", False)], _is_pack) == (
        "Pack.v2",
        "/c/Pack.v2",
    )


def _write_pack(root: Path, name: str, body: str) -> Path:
    pack = root / name
    (pack / "nodes").mkdir(parents=True)
    (pack / "nodes" / "__init__.py").write_text("")
    (pack / "__init__.py").write_text(textwrap.dedent(body))
    return pack


def test_packs_loaded_as_comfyui_loads_them_find_themselves(tmp_path):
    custom = tmp_path / "custom_nodes"
    _write_pack(custom, "Broken", "raise RuntimeError('a pack that fails at import')\n")
    _write_pack(
        custom,
        "Seeker",
        """\
        import json  # modules the pack imports come after it in sys.modules
        import email.mime.text
        from . import nodes
        import os
        from comfy_airlock.compat import importing
        FOUND = importing.importing_pack(lambda d: os.path.isdir(os.path.join(d, "nodes")))
        NODE_CLASS_MAPPINGS = {}
        """,
    )
    _write_pack(
        custom,
        "Later",
        """\
        import os
        from comfy_airlock.compat import importing
        FOUND = importing.importing_pack(lambda d: os.path.isdir(os.path.join(d, "nodes")))
        """,
    )
    # ComfyUI 0.30.0 nodes.load_custom_node: the module goes into sys.modules under the
    # folder's name, then its __init__.py runs; a failure leaves it there.
    code = textwrap.dedent(
        f"""\
        import importlib.util, os, sys
        found = {{}}
        for name in ("Broken", "Seeker", "Later"):
            path = os.path.join({str(custom)!r}, name)
            spec = importlib.util.spec_from_file_location(name, os.path.join(path, "__init__.py"))
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except Exception:
                continue
            found[name] = module.FOUND
        print(found)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == repr(
        {"Seeker": ("Seeker", str(custom / "Seeker")), "Later": ("Later", str(custom / "Later"))}
    ), out.stdout + out.stderr

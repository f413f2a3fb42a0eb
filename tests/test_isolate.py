"""``airlock isolate`` and ``airlock isolate --undo``, run as a user runs them: the real command
in a subprocess, environments built by the real uv, nodes read in a real worker.

The "ComfyUI" here is a folder the commands recognize (``main.py``, ``comfy/`` and a
``requirements.txt`` of one small package), so that builds stay small; the whole path through
the real ComfyUI is tests/comfyui/test_wheel_install.py.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from conftest import ROOT

PLAIN = ROOT / "tests" / "packs" / "plain-pack"


@pytest.fixture
def comfy(tmp_path: Path) -> Path:
    """A ComfyUI folder (also the base holding custom_nodes/ and isolated_nodes/)."""
    d = tmp_path / "ComfyUI"
    (d / "comfy").mkdir(parents=True)
    (d / "main.py").write_text("")
    (d / "requirements.txt").write_text("six\n")
    (d / "custom_nodes").mkdir()
    (d / "isolated_nodes").mkdir()
    return d


def airlock(comfy: Path, *args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "AIRLOCK_HOME": str(home)}
    env.pop("COMFYUI_DIR", None)
    return subprocess.run(
        [sys.executable, "-m", "comfy_airlock.cli", *args, "--comfyui", str(comfy)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` with its content's hash (folders and links too)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if "__pycache__" in p.parts:
            continue
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def add_pack(comfy: Path, name: str, files: dict[str, str] | None = None) -> Path:
    dst = comfy / "custom_nodes" / name
    shutil.copytree(PLAIN, dst, ignore=shutil.ignore_patterns("__pycache__"))
    for rel, text in (files or {}).items():
        (dst / rel).write_text(text)
    return dst


def test_isolate_writes_airlock_toml_builds_lists_nodes_and_undo_restores(comfy, tmp_path):
    pyproject = '[project]\nname = "plain-pack"\ndependencies = ["six>=1.16", "idna"]\n'
    add_pack(comfy, "plain-pack", {"pyproject.toml": pyproject})
    (comfy / "isolated_nodes").rmdir()  # isolate makes it, --undo removes it again
    before = snapshot(comfy)
    r = airlock(comfy, "isolate", "plain-pack", home=tmp_path / "home")
    assert r.returncode == 0, r.stderr + r.stdout
    pack = comfy / "isolated_nodes" / "plain-pack"
    assert not (comfy / "custom_nodes" / "plain-pack").exists()
    config = tomllib.loads((pack / "airlock.toml").read_text())
    # requirements.txt, as ComfyUI-Manager installs it; what pyproject.toml adds is named.
    assert config["dependencies"] == ["six>=1.16"]
    assert "from requirements.txt:" in r.stdout
    assert "pyproject.toml also declares idna: left out" in r.stdout
    # Read in its worker, from its own environment: the node module imports six there.
    assert "1 node(s)" in r.stdout and "PlainWhere (Plain: where am I)" in r.stdout
    assert "environment built" in r.stdout
    assert "resolving" in r.stderr  # the build's progress lines

    r = airlock(comfy, "isolate", "--undo", "plain-pack", home=tmp_path / "home")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "removed the airlock.toml" in r.stdout
    assert snapshot(comfy) == before


def test_undo_keeps_a_config_the_pack_had_and_an_edited_one(comfy, tmp_path):
    own = 'dependencies = ["six"]  # the author\'s own\n'
    add_pack(comfy, "own-config", {"airlock.toml": own})
    add_pack(comfy, "edited")
    before = snapshot(comfy)
    home = tmp_path / "home"
    r = airlock(comfy, "isolate", "own-config", home=home)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "uses its own airlock.toml" in r.stdout
    r = airlock(comfy, "isolate", "edited", home=home)
    assert r.returncode == 0, r.stderr + r.stdout
    edited = comfy / "isolated_nodes" / "edited" / "airlock.toml"
    edited.write_text(edited.read_text() + "call-deadline = 60\n")
    for name in ("own-config", "edited"):
        r = airlock(comfy, "isolate", "--undo", name, home=home)
        assert r.returncode == 0, r.stderr + r.stdout
    assert (comfy / "custom_nodes" / "own-config" / "airlock.toml").read_text() == own
    kept = comfy / "custom_nodes" / "edited" / "airlock.toml.edited"
    assert "call-deadline = 60" in kept.read_text()
    kept.unlink()
    assert snapshot(comfy) == before


def test_no_such_pack(comfy, tmp_path):
    add_pack(comfy, "plain-pack")
    before = snapshot(comfy)
    r = airlock(comfy, "isolate", "no-such-pack", home=tmp_path / "home")
    assert r.returncode == 1
    assert "no-such-pack: no such pack in" in r.stderr
    assert "packs there: plain-pack" in r.stderr
    assert snapshot(comfy) == before
    r = airlock(comfy, "isolate", "--undo", "plain-pack", home=tmp_path / "home")
    assert r.returncode == 1
    assert "it is in custom_nodes/, not isolated" in r.stderr
    assert snapshot(comfy) == before


def test_a_pack_already_isolated(comfy, tmp_path):
    add_pack(comfy, "plain-pack")
    shutil.copytree(PLAIN, comfy / "isolated_nodes" / "plain-pack")
    before = snapshot(comfy)
    r = airlock(comfy, "isolate", "plain-pack", home=tmp_path / "home")
    assert r.returncode == 1
    assert "plain-pack: already isolated" in r.stderr
    assert "custom_nodes/plain-pack exists too" in r.stderr
    assert snapshot(comfy) == before


def test_a_requirement_that_does_not_resolve_leaves_everything_as_it_was(comfy, tmp_path):
    add_pack(comfy, "bad-req", {"requirements.txt": "airlock-no-such-package-xyz==1.0\n"})
    (comfy / "isolated_nodes").rmdir()  # made by isolate, so removed again on failure
    before = snapshot(comfy)
    r = airlock(comfy, "isolate", "bad-req", home=tmp_path / "home")
    assert r.returncode == 1, r.stdout
    assert "bad-req" in r.stderr and "airlock-no-such-package-xyz" in r.stderr
    assert "full log:" in r.stderr
    assert snapshot(comfy) == before


def test_a_pack_whose_nodes_fail_to_import_is_put_back(comfy, tmp_path):
    add_pack(comfy, "broken-import", {"nodes.py": "raise ImportError('missing libfoo.so')\n"})
    before = snapshot(comfy)
    r = airlock(comfy, "isolate", "broken-import", home=tmp_path / "home")
    assert r.returncode == 1, r.stdout
    assert "broken-import: its nodes could not be read in its worker" in r.stderr
    assert "missing libfoo.so" in r.stderr
    assert snapshot(comfy) == before


def test_a_requirements_line_airlock_toml_cannot_hold(comfy, tmp_path):
    add_pack(comfy, "editable", {"requirements.txt": "six\n-e ./vendored\n"})
    before = snapshot(comfy)
    r = airlock(comfy, "isolate", "editable", home=tmp_path / "home")
    assert r.returncode == 1
    assert "editable: requirements.txt, line 2: an editable install" in r.stderr
    assert snapshot(comfy) == before


# --- imports a pack does not declare (ADR 0049) ---------------------------------------------
# Real packs import what ComfyUI's environment happens to have (ComfyUI-post-processing-nodes
# imports cv2 and declares nothing). Here: iniconfig, which the venv running `airlock` (as
# ComfyUI's Python runs it) has and the pack's environment would not.
UNDECLARED = "import iniconfig  # not declared: natively it comes from ComfyUI's environment\n"


def with_import(line: str) -> dict[str, str]:
    return {"nodes.py": line + (PLAIN / "nodes.py").read_text()}


def test_an_undeclared_import_is_added_at_comfyuis_version_and_undo_restores(comfy, tmp_path):
    from importlib.metadata import version

    pin = f"iniconfig=={version('iniconfig')}"
    add_pack(comfy, "undeclared", with_import(UNDECLARED))
    before = snapshot(comfy)
    home = tmp_path / "home"
    r = airlock(comfy, "isolate", "undeclared", home=home)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "imports iniconfig without declaring it; ComfyUI's environment has it" in r.stdout
    assert f"added {pin} to airlock.toml" in r.stdout
    assert "1 node(s)" in r.stdout  # read in its worker once the package was there
    text = (comfy / "isolated_nodes" / "undeclared" / "airlock.toml").read_text()
    assert tomllib.loads(text)["dependencies"] == ["six>=1.16", pin]
    assert f"#   {pin} (imported as iniconfig)" in text
    # The rewritten file is still isolate's own: --undo removes it, nothing else changes.
    r = airlock(comfy, "isolate", "--undo", "undeclared", home=home)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "removed the airlock.toml" in r.stdout
    assert snapshot(comfy) == before


def test_an_undeclared_import_comfyui_lacks_too_is_named_and_nothing_changes(comfy, tmp_path):
    add_pack(comfy, "lacks", with_import("import airlock_no_such_module_xyz\n"))
    before = snapshot(comfy)
    r = airlock(comfy, "isolate", "lacks", home=tmp_path / "home")
    assert r.returncode == 1, r.stdout
    assert "lacks: its nodes could not be read in its worker" in r.stderr
    assert "No module named 'airlock_no_such_module_xyz'" in r.stderr
    assert "ComfyUI's environment does not have it either" in r.stderr
    assert snapshot(comfy) == before


def test_a_packs_own_config_is_never_edited_the_error_says_what_to_add(comfy, tmp_path):
    from importlib.metadata import version

    own = 'dependencies = ["six"]  # the author\'s own\n'
    add_pack(comfy, "own-undeclared", {"airlock.toml": own, **with_import(UNDECLARED)})
    before = snapshot(comfy)
    r = airlock(comfy, "isolate", "own-undeclared", home=tmp_path / "home")
    assert r.returncode == 1, r.stdout
    config = comfy / "custom_nodes" / "own-undeclared" / "airlock.toml"  # where it is now
    assert f'Add "iniconfig=={version("iniconfig")}" to `dependencies` in {config}' in r.stderr
    assert snapshot(comfy) == before


def test_an_undeclared_import_whose_pin_conflicts_is_added_by_name(comfy, tmp_path):
    from importlib.metadata import version

    # The venv running `airlock` has requests, which needs urllib3>=1.26; the pack pins an
    # older urllib3 and imports requests without declaring it: the pin cannot resolve, an
    # older requests can (as when a pack pins numpy<2 and ComfyUI has an opencv needing 2).
    add_pack(
        comfy,
        "conflicting",
        {"requirements.txt": "six>=1.16\nurllib3==1.25.11\n", **with_import("import requests\n")},
    )
    r = airlock(comfy, "isolate", "conflicting", home=tmp_path / "home")
    assert r.returncode == 0, r.stderr + r.stdout
    pin = f"requests=={version('requests')}"
    assert f"added {pin} to airlock.toml" in r.stdout
    assert f"{pin} does not resolve with the pack's needs; trying requests" in r.stdout
    config = tomllib.loads((comfy / "isolated_nodes" / "conflicting" / "airlock.toml").read_text())
    assert config["dependencies"] == ["six>=1.16", "urllib3==1.25.11", "requests"]
    assert "1 node(s)" in r.stdout


def test_an_undeclared_import_a_pack_exits_over_is_added_too(comfy, tmp_path):
    # rembg's shape: the missing module is caught, a message printed, and the import exits.
    guarded = (
        "try:\n    import iniconfig\nexcept ImportError:\n"
        "    print('No iniconfig backend found: pip install it')\n    raise SystemExit(1)\n"
    )
    add_pack(comfy, "exits", with_import(guarded))
    r = airlock(comfy, "isolate", "exits", home=tmp_path / "home")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "imports iniconfig without declaring it" in r.stdout
    assert "1 node(s)" in r.stdout


# Comfyroll's shape: a group of nodes is imported under ``except ImportError`` (its module's
# import of matplotlib fails and is swallowed), and the pack fails later, at a name that group
# would have defined. The import's error names no module; the worker notes what the import
# looked for and found nowhere (ADR 0050).
SWALLOWED = {
    "graphics.py": "import iniconfig\n\nclass Graphics:\n    pass\n",
    "nodes.py": (
        "try:\n    from .graphics import Graphics\nexcept ImportError:\n"
        "    print('Failed to load Graphics nodes')\n"
        "try:\n    import airlock_optional_xyz  # an optional module, absent everywhere\n"
        "except ImportError:\n    pass\n"
        "try:\n    import pip\nexcept ImportError:\n    pass\n"
        "GRAPHICS = Graphics\n" + (PLAIN / "nodes.py").read_text()
    ),
}


def test_a_module_whose_import_the_pack_swallowed_is_added_too(comfy, tmp_path):
    from importlib.metadata import version

    pin = f"iniconfig=={version('iniconfig')}"
    add_pack(comfy, "swallowed", SWALLOWED)
    r = airlock(comfy, "isolate", "swallowed", home=tmp_path / "home")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "imports iniconfig without declaring it; ComfyUI's environment has it" in r.stdout
    assert "1 node(s)" in r.stdout
    config = tomllib.loads((comfy / "isolated_nodes" / "swallowed" / "airlock.toml").read_text())
    # Only what ComfyUI has, and never pip (ComfyUI's venv has it; the pack probed for it).
    assert config["dependencies"] == ["six>=1.16", pin]


def test_a_swallowed_module_comfyui_lacks_too_leaves_the_error_and_its_note(comfy, tmp_path):
    files = {
        **SWALLOWED,
        "graphics.py": SWALLOWED["graphics.py"].replace("iniconfig", "airlock_no_such_xyz"),
    }
    add_pack(comfy, "swallowed-lacks", files)
    before = snapshot(comfy)
    r = airlock(comfy, "isolate", "swallowed-lacks", home=tmp_path / "home")
    assert r.returncode == 1, r.stdout
    assert "name 'Graphics' is not defined" in r.stderr, r.stderr
    # What it looked for that ComfyUI lacks too is named (pip, which ComfyUI has, is not).
    looked = "looked for airlock_no_such_xyz, airlock_optional_xyz, which neither its environment"
    assert looked in r.stderr
    assert snapshot(comfy) == before


# AlekPet's shape (ComfyUI_Custom_Nodes_AlekPet): a group of nodes imported under ``except
# Exception``, whose package the pack pip-installs natively at its first start, so ComfyUI's
# environment has it; isolated, the import succeeds without those nodes (ADR 0057).
WENT_WITHOUT = {
    "translate.py": "import iniconfig\n\nclass Translate:\n    pass\n",
    "nodes.py": (
        "try:\n    from .translate import Translate\nexcept Exception:\n    Translate = None\n"
        "try:\n    import airlock_optional_xyz  # absent everywhere: not named\n"
        "except ImportError:\n    pass\n"
        "try:\n    import pip  # ComfyUI has it; never named\nexcept ImportError:\n    pass\n"
        + (PLAIN / "nodes.py").read_text()
    ),
}


def test_a_module_a_successful_import_went_on_without_is_named_not_added(comfy, tmp_path):
    from importlib.metadata import version

    add_pack(comfy, "went-without", WENT_WITHOUT)
    r = airlock(comfy, "isolate", "went-without", home=tmp_path / "home")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "1 node(s)" in r.stdout
    config = comfy / "isolated_nodes" / "went-without" / "airlock.toml"
    note = (
        "note: went-without's import went on without iniconfig, which its own code imports and "
        f"ComfyUI's environment has: iniconfig (iniconfig {version('iniconfig')}). Natively the "
        "pack has them; if nodes it has natively are missing here, add "
        f'"iniconfig=={version("iniconfig")}" to `dependencies` in {config} and restart ComfyUI.'
    )
    assert note in r.stdout, r.stdout
    # Named, not added: the import succeeded, and the file is what the pack declares.
    assert tomllib.loads(config.read_text())["dependencies"] == ["six>=1.16"]


def test_what_a_library_probes_is_not_a_packs_own_import(comfy, tmp_path):
    # A library the pack imports looks for an optional module (transformers probes dozens):
    # not the pack's own import, so nothing is said, though ComfyUI's environment has it.
    lib = tmp_path / "lib"
    (lib / "probing_lib").mkdir(parents=True)
    (lib / "probing_lib" / "__init__.py").write_text(
        "import importlib.util\nHAS = importlib.util.find_spec('iniconfig') is not None\n"
    )
    files = {
        "nodes.py": f"import sys\nsys.path.append({str(lib)!r})\nimport probing_lib\n"
        + (PLAIN / "nodes.py").read_text()
    }
    add_pack(comfy, "probes", files)
    r = airlock(comfy, "isolate", "probes", home=tmp_path / "home")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "1 node(s)" in r.stdout
    assert "went on without" not in r.stdout


# ComfyUI-SaveImageWithMetaData's shape: while it is imported, the pack imports its own files
# by their absolute name under ``custom_nodes`` (natively ComfyUI's folder is on sys.path).
SELF_BY_PATH = {
    "rules.py": "RULES = {'sampler': 'seed'}\n",
    "nodes.py": (
        "import importlib\n"
        "rules = importlib.import_module('custom_nodes.Self-By-Path.rules')\n"
        "assert rules.RULES == {'sampler': 'seed'}\n" + (PLAIN / "nodes.py").read_text()
    ),
}


def test_a_pack_that_imports_itself_under_custom_nodes_loads_isolated(comfy, tmp_path):
    add_pack(comfy, "Self-By-Path", SELF_BY_PATH)
    r = airlock(comfy, "isolate", "Self-By-Path", home=tmp_path / "home")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "1 node(s)" in r.stdout


GROUP_MEMBER = '''"""A pack that uses its group's other pack, and iniconfig without declaring it."""

import iniconfig  # natively it comes from ComfyUI's environment


class GroupCaller:
    CATEGORY = "airlock tests"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "call"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    def call(self):
        return (iniconfig.__name__,)


NODE_CLASS_MAPPINGS = {"GroupCaller": GroupCaller}
'''


def test_a_group_is_isolated_together_and_undo_restores(comfy, tmp_path):
    """ADR 0054: two packs into one folder and one airlock.toml that names them; a member's
    undeclared import is added as for one pack; --undo puts both back as they were."""
    from importlib.metadata import version

    pin = f"iniconfig=={version('iniconfig')}"
    add_pack(comfy, "pack-a")
    caller = comfy / "custom_nodes" / "pack-b"
    caller.mkdir()
    (caller / "__init__.py").write_text(GROUP_MEMBER)
    (caller / "requirements.txt").write_text("six\n")
    before = snapshot(comfy)
    home = tmp_path / "home"
    r = airlock(comfy, "isolate", "--group", "ab", "pack-a", "pack-b", home=home)
    assert r.returncode == 0, r.stderr + r.stdout
    group = comfy / "isolated_nodes" / "ab"
    assert not (comfy / "custom_nodes" / "pack-a").exists()
    assert (group / "pack-a" / "nodes.py").is_file() and (group / "pack-b").is_dir()
    config = tomllib.loads((group / "airlock.toml").read_text())
    assert config["packs"] == ["pack-a", "pack-b"]
    assert config["dependencies"] == ["six>=1.16", "six", pin]
    assert "from pack-a/requirements.txt and pack-b/requirements.txt" in r.stdout
    assert "pack-b failed to import" not in r.stdout
    assert "imports iniconfig without declaring it" in r.stdout
    assert "ab: 2 node(s)" in r.stdout and "GroupCaller" in r.stdout, r.stdout
    assert "pack-a, pack-b now run in one process of their own" in r.stdout

    r = airlock(comfy, "isolate", "--undo", "ab", home=home)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "removed the group's folder" in r.stdout
    assert snapshot(comfy) == before

    # Grouped again, its airlock.toml edited: --undo keeps the folder with the edited file.
    r = airlock(comfy, "isolate", "--group", "ab", "pack-a", "pack-b", home=home)
    assert r.returncode == 0, r.stderr + r.stdout
    with (group / "airlock.toml").open("a") as f:
        f.write('python = "3.11"\n')
    r = airlock(comfy, "isolate", "--undo", "ab", home=home)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "you edited its airlock.toml: kept" in r.stdout
    assert sorted(p.name for p in group.iterdir()) == ["airlock.toml"]
    assert (comfy / "custom_nodes" / "pack-a").is_dir() and (
        comfy / "custom_nodes" / "pack-b"
    ).is_dir()


def test_a_group_member_that_cannot_import_puts_everything_back(comfy, tmp_path):
    add_pack(comfy, "pack-a")
    add_pack(comfy, "pack-b", {"__init__.py": "import airlock_no_such_module_xyz\n"})
    before = snapshot(comfy)
    r = airlock(comfy, "isolate", "--group", "ab", "pack-a", "pack-b", home=tmp_path / "home")
    assert r.returncode == 1, r.stdout
    assert "ab: its nodes could not be read in its worker: its pack pack-b failed to import" in (
        r.stderr
    )
    assert "add the package that provides airlock_no_such_module_xyz" in r.stderr
    assert snapshot(comfy) == before


def test_a_group_refuses_a_member_with_its_own_config(comfy, tmp_path):
    add_pack(comfy, "pack-a")
    add_pack(comfy, "pack-b", {"airlock.toml": "dependencies = []\n"})
    before = snapshot(comfy)
    r = airlock(comfy, "isolate", "--group", "ab", "pack-a", "pack-b", home=tmp_path / "home")
    assert r.returncode == 1
    assert "pack-b: it has its own airlock.toml, and a group has one config" in r.stderr
    r2 = airlock(comfy, "isolate", "pack-a", "pack-b", home=tmp_path / "home")
    assert r2.returncode == 2 and "with --group NAME" in r2.stderr
    assert snapshot(comfy) == before


def test_a_pack_updated_since_isolate_gets_its_airlock_toml_and_env_again(comfy, tmp_path):
    """ADR 0059: the user updates an isolated pack (``git pull`` in its folder) and its
    requirements change; before its environment is next made (``isolated_toml.refresh``, which
    ComfyUI's loader runs at its start and ``airlock build`` before each pack) the airlock.toml
    isolate wrote follows them, the environment is built again with the new package, and
    --undo still knows the file as isolate's own."""
    from comfy_airlock import env as airlock_env
    from comfy_airlock import isolated_toml
    from comfy_airlock.cli import bundled_uv

    add_pack(comfy, "updated")
    before = snapshot(comfy)
    home = tmp_path / "home"
    r = airlock(comfy, "isolate", "updated", home=home)
    assert r.returncode == 0, r.stderr + r.stdout
    pack = comfy / "isolated_nodes" / "updated"
    assert isolated_toml.refresh(pack, "updated") == ([], False)  # nothing changed: nothing said

    original = (pack / "requirements.txt").read_text()
    (pack / "requirements.txt").write_text("six>=1.16\nidna\n")  # the update
    r = airlock(comfy, "build", "updated", home=home)  # the user builds before starting
    assert r.returncode == 0, r.stderr + r.stdout
    assert "warning: pack 'updated': its requirements changed" in r.stderr, r.stderr
    assert "(now also idna)" in r.stderr and str(pack / "airlock.toml") in r.stderr, r.stderr
    assert "updated: built" in r.stdout, r.stdout
    assert tomllib.loads((pack / "airlock.toml").read_text())["dependencies"] == [
        "six>=1.16",
        "idna",
    ]
    assert isolated_toml.refresh(pack, "updated") == ([], False)  # said once
    info = airlock_env.ensure_env(
        pack, comfyui_dir=comfy, home=home, uv=bundled_uv(), host_python=sys.executable
    )
    assert not info["built"], info  # the build made it: the start finds it up to date
    subprocess.run([info["python"], "-c", "import idna"], check=True)

    (pack / "requirements.txt").write_text(original)  # updated back: idna goes again
    notices = isolated_toml.refresh(pack, "updated").notices
    assert len(notices) == 1 and "(no longer idna)" in notices[0], notices
    r = airlock(comfy, "isolate", "--undo", "updated", home=home)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "removed the airlock.toml" in r.stdout
    assert snapshot(comfy) == before


def test_an_update_that_does_not_resolve_says_its_file_was_written_again(
    comfy, tmp_path, monkeypatch, caplog
):
    """ADR 0059: when the requirements an updated pack asks for do not resolve, the start that
    wrote its airlock.toml again fails the pack with the resolver's error and says that the
    file was written again, what to do, and that the environment it had is not used."""
    import logging

    from comfy_airlock import settings
    from comfy_airlock.host import loader

    add_pack(comfy, "stuck")
    home = tmp_path / "home"
    r = airlock(comfy, "isolate", "stuck", home=home)
    assert r.returncode == 0, r.stderr + r.stdout
    pack = comfy / "isolated_nodes" / "stuck"
    (pack / "requirements.txt").write_text("six>=1.16\nsix<1.0\n")  # an update that cannot be
    monkeypatch.setenv("AIRLOCK_HOME", str(home))
    monkeypatch.setattr(settings, "_SETTINGS", [])  # read again from this environment
    try:
        with caplog.at_level(logging.WARNING, logger="comfy_airlock"):
            assert loader.load_pack(str(pack), "stuck") == ({}, {})
    finally:
        settings._SETTINGS.clear()
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert "its requirements changed since `airlock isolate` wrote" in said, said
    assert "pack 'stuck' is not loaded" in said, said
    assert "written again at this start" in said and str(pack / "airlock.toml") in said, said
    row = loader._FAILED.pop("stuck")
    assert row["cause"] == "env" and "six" in row["error"], row


def test_a_pack_placed_by_hand_is_named_what_its_import_went_without_at_the_start(
    comfy, tmp_path, monkeypatch, caplog
):
    """ADR 0057 at ComfyUI's start: a pack put in isolated_nodes/ by hand (never through
    isolate) is read by the loader in a real worker of its real environment, and the start that
    read it says what the import went on without; the next start, from the cached scan, says
    nothing."""
    import logging

    from comfy_airlock import env as airlock_env
    from comfy_airlock import settings
    from comfy_airlock.cli import bundled_uv
    from comfy_airlock.host import loader
    from comfy_airlock.host.pack import IsolatedPack

    pack = comfy / "isolated_nodes" / "by-hand"
    shutil.copytree(add_pack(comfy, "by-hand", WENT_WITHOUT), pack)
    (pack / "airlock.toml").write_text("")  # its requirements.txt, as the user guide says
    home = tmp_path / "home"
    monkeypatch.setenv("AIRLOCK_HOME", str(home))
    monkeypatch.setattr(settings, "_SETTINGS", [])
    info = airlock_env.ensure_env(
        pack, comfyui_dir=comfy, home=home, uv=bundled_uv(), host_python=sys.executable
    )

    def start() -> list[str]:
        caplog.clear()
        p = IsolatedPack.from_env("by-hand", str(pack), info)
        try:
            with caplog.at_level(logging.WARNING, logger="comfy_airlock"):
                assert "PlainWhere" in loader._read_nodes(p, None)["nodes"]
        finally:
            p.close()
        return [r.getMessage() for r in caplog.records]

    [said] = start()
    assert "by-hand's import went on without iniconfig, which its own code imports" in said
    assert start() == []  # cached

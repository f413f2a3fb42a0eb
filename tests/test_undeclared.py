"""What a pack imports without declaring it (ADR 0049): the rules read alone, the provider
read from this very environment (the test venv plays ComfyUI's), and the two messages that
carry the hint: a pack whose import fails at ComfyUI's start, a node whose late import fails.
``airlock isolate``'s part runs for real in tests/test_isolate.py."""

from __future__ import annotations

from importlib.metadata import version

from comfy_airlock import undeclared
from comfy_airlock.host import loader
from comfy_airlock.host.pack import _with_worker_traceback


def test_missing_module_reads_only_a_missing_top_level_module():
    assert undeclared.missing_module("ModuleNotFoundError", "No module named 'cv2'") == "cv2"
    assert undeclared.missing_module("builtins.ModuleNotFoundError", "No module named 'cv2'")
    # A traceback after the first line does not matter; a submodule is not this case (the
    # package is there, in another shape), nor any other error.
    assert undeclared.missing_module("ModuleNotFoundError", "No module named 'x'\n  File") == "x"
    assert undeclared.missing_module("ModuleNotFoundError", "No module named 'a.b'") is None
    assert undeclared.missing_module("ImportError", "No module named 'cv2'") is None
    assert undeclared.missing_module("ModuleNotFoundError", "cannot import name 'x'") is None
    assert undeclared.missing_module(None, None) is None


def test_the_provider_is_the_installed_distribution_that_holds_the_module(tmp_path, monkeypatch):
    p = undeclared.provider_here("iniconfig")
    assert p is not None and p.distribution == "iniconfig"
    assert p.requirement == f"iniconfig=={version('iniconfig')}"
    yaml = undeclared.provider_here("yaml")  # imported as yaml, installed as PyYAML
    assert yaml is not None and yaml.requirement == f"PyYAML=={version('PyYAML')}"
    assert undeclared.provider_here("json") is None  # Python's own
    assert undeclared.provider_here("airlock_no_such_module_xyz") is None
    # Found, but no installed package holds it (another custom node's folder on sys.path).
    (tmp_path / "loose_module_xyz.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    loose = undeclared.provider_here("loose_module_xyz")
    assert loose is not None and loose.distribution is None and loose.requirement is None
    assert loose.origin == str(tmp_path / "loose_module_xyz.py")


def test_the_hint_says_what_to_add_and_where():
    p = undeclared.Provider("cv2", "opencv-python", "4.10.0.84", "/venv/cv2/__init__.py")
    text = undeclared.hint("cv2", p, "/packs/x/airlock.toml")
    assert "imports cv2 without declaring it" in text and "opencv-python 4.10.0.84" in text
    assert 'Add "opencv-python==4.10.0.84" to `dependencies` in /packs/x/airlock.toml' in text
    assert "does not have it either" in undeclared.hint("cv2", None, "/c")
    loose = undeclared.Provider("impact", None, None, "/comfy/custom_nodes/impact/__init__.py")
    assert "belong in one environment" in undeclared.hint("impact", loose, "/c")


def test_a_pack_that_fails_at_comfyuis_start_is_told_what_to_add(tmp_path):
    (tmp_path / "airlock.toml").write_text("dependencies = []\n")
    failure = {
        "type": "ModuleNotFoundError",
        "error": "No module named 'iniconfig'",
        "traceback": "Traceback (most recent call last):\n  ...\n",
    }
    loader._scan_failed("hinted", str(tmp_path), failure, None)
    reason = loader._FAILED.pop("hinted")["error"]
    head, hint, *rest = reason.splitlines()
    assert head.endswith("ModuleNotFoundError: No module named 'iniconfig'")
    config = tmp_path / "airlock.toml"
    assert f'Add "iniconfig=={version("iniconfig")}" to `dependencies` in {config}' in hint
    assert rest[0] == "Traceback (most recent call last):"  # the worker's, after the hint


def test_a_node_whose_late_import_fails_is_told_what_to_add(tmp_path):
    e = ModuleNotFoundError("No module named 'iniconfig'")
    e.remote_type = "builtins.ModuleNotFoundError"
    e.remote_traceback = "Traceback (most recent call last):\n  ...\n"
    _with_worker_traceback(e, "late", "LateNode", str(tmp_path))
    text = str(e)
    assert text.startswith("No module named 'iniconfig'\nThe pack imports iniconfig")
    assert f"in {tmp_path / 'airlock.toml'}" in text
    assert "'LateNode' raised in the worker of pack 'late'" in text


REMBG = """Traceback (most recent call last):
  File "/env/site-packages/rembg/bg.py", line 9, in <module>
    import onnxruntime as ort
ModuleNotFoundError: No module named 'onnxruntime'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/packs/rembg-comfyui-node/__init__.py", line 1, in <module>
    from rembg import remove
  File "/env/site-packages/rembg/bg.py", line 20, in <module>
    sys.exit(1)
SystemExit: 1
"""


def test_a_missing_module_that_led_to_the_error_is_read_from_the_traceback():
    # rembg's shape: it catches the ImportError, prints how to install, and exits.
    assert undeclared.missing_module_in(REMBG) == "onnxruntime"
    direct = REMBG.replace(
        "During handling of the above exception, another exception occurred:",
        "The above exception was the direct cause of the following exception:",
    )
    assert undeclared.missing_module_in(direct) == "onnxruntime"
    # A ModuleNotFoundError that ends the traceback is the direct case, not a chain; one that
    # did not lead to the error (no chain after it) is not the cause.
    alone = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'x'\n"
    assert undeclared.missing_module_in(alone) is None
    assert undeclared.missing_module_in(None) is None
    failure = {"type": "SystemExit", "error": "builtins.SystemExit: 1", "traceback": REMBG}
    assert undeclared.missing_module_of_failure(failure) == "onnxruntime"


def test_an_exit_at_import_is_named_once_in_the_reason():
    from comfy_airlock._native import RemoteError
    from comfy_airlock.host import scan_cache

    # As the host re-creates a worker's SystemExit: a type it cannot raise, named in the text.
    e = RemoteError("builtins.SystemExit: 1")
    e.remote_type = "builtins.SystemExit"
    e.remote_traceback = REMBG
    failure = scan_cache.failure_of(e)
    assert failure["type"] == "SystemExit" and failure["error"] == "SystemExit: 1"
    # The record is what the log and `airlock doctor` both read (was "SystemExit:
    # builtins.SystemExit: 1" in each).
    assert scan_cache.describe(failure).splitlines()[0] == "SystemExit: 1"


def test_the_modules_a_failed_import_looked_for_are_read_from_its_note():
    note = undeclared.looked_for_note(["matplotlib", "pip"])
    tb = f"Traceback (most recent call last):\nNameError: name 'CR_HalftoneGrid' is not defined\n{note}\n"
    assert undeclared.looked_for_in(tb) == ["matplotlib", "pip"]
    assert undeclared.looked_for_in("Traceback (most recent call last):\nNameError: x\n") == []
    assert undeclared.looked_for_in(None) == []


def test_the_looked_for_hint_names_what_comfyui_has_never_pip(tmp_path):
    config = str(tmp_path / "airlock.toml")
    text = undeclared.looked_for_hint_here(["iniconfig", "pip", "airlock_no_such_xyz"], config)
    assert text is not None
    assert "looked for iniconfig without declaring it" in text
    assert f'add "iniconfig=={version("iniconfig")}" to `dependencies` in {config}' in text
    assert "pip" not in text.replace("pipe", "")  # never suggested: it installs at run time
    # ComfyUI has none of them (or only pip): they are named, nothing is pinned.
    lacks = undeclared.looked_for_hint_here(["pip", "airlock_no_such_xyz"], config)
    assert lacks is not None and "looked for airlock_no_such_xyz, which neither" in lacks
    assert undeclared.looked_for_hint_here(["pip"], config) is None
    assert undeclared.looked_for_hint_here([], config) is None


def test_a_pack_that_swallowed_a_missing_module_is_told_what_to_add_at_comfyuis_start(tmp_path):
    (tmp_path / "airlock.toml").write_text("dependencies = []\n")
    note = undeclared.looked_for_note(["iniconfig"])
    failure = {
        "type": "NameError",
        "error": "name 'Graphics' is not defined",
        "traceback": f"Traceback (most recent call last):\n  ...\nNameError: ...\n{note}\n",
    }
    loader._scan_failed("swallowed", str(tmp_path), failure, None)
    head, hint, *_ = loader._FAILED.pop("swallowed")["error"].splitlines()
    assert head.endswith("NameError: name 'Graphics' is not defined")
    assert hint.startswith("While it was imported, the pack looked for iniconfig")

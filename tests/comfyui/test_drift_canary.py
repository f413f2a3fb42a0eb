"""Drift canary, part (a): every member upstream reads on the patcher of a ledger entry exists on
the stand-in. It scans the REAL upstream source (the tree under test), so a ComfyUI version that
starts touching a new member fails here, not in a user's prompt.

Part (b), behaviour through the real upstream functions, is tests/comfyui/test_memory_bridge.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

from comfy_airlock.host.standin import StandIn

# Where upstream touches patchers of ledger entries (notes/comfyui-upstream.md §2.7).
SOURCES = [
    "comfy/model_management.py",
    "comfy/multigpu.py",
    "comfy/sampler_helpers.py",
    "comfy/controlnet.py",
    "execution.py",
]
# Functions whose parameter or loop variables named here are patchers.
PATCHER_NAMES = {
    "LoadedModel.__init__": {"model"},
    "LoadedModel._set_model": {"model"},
    "load_models_gpu": {"x", "m"},
    "unload_model_and_clones": {"model"},
}
# Read only on paths a stand-in never takes.
NOT_NEEDED = {
    "dynamic_pins": "read only when is_dynamic() is True; a stand-in's is False",
    "__class__": "every object has one",
    "model": "the stand-in's handle (ModelHandle)",
    "clone": "multigpu.py clones only entries with the host model's clone_base_uuid and "
    "is_multigpu_base_clone; a stand-in's uuid is its own",
}


def _is_loaded_models_call(node: ast.AST | None) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute | ast.Name)
        and getattr(node.func, "attr", getattr(node.func, "id", None)) == "loaded_models"
    )


def patcher_members(path: Path) -> dict[str, set[int]]:
    """Attribute names read on patchers of ledger entries. In ``model_management.py``:
    ``<entry>.model.<attr>`` (``LoadedModel.model`` is the patcher), names bound to it, and the
    known patcher parameters. Elsewhere: loop variables over ``loaded_models()`` (a list of
    patchers)."""
    tree = ast.parse(path.read_text())
    in_mm = path.name == "model_management.py"
    found: dict[str, set[int]] = {}

    def visit(func: ast.AST, qual: str) -> None:
        names = set(PATCHER_NAMES.get(qual, ())) if in_mm else set()
        lists: set[str] = set()
        for node in ast.walk(func):
            value = getattr(node, "value", None)
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AnnAssign):
                targets = [node.target]
            if in_mm and isinstance(value, ast.Attribute) and value.attr == "model":
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
            if _is_loaded_models_call(value):
                lists |= {t.id for t in targets if isinstance(t, ast.Name)}
        for node in ast.walk(func):
            if isinstance(node, ast.For | ast.comprehension):
                it = node.iter
                over_patchers = _is_loaded_models_call(it) or (
                    isinstance(it, ast.Name) and it.id in lists
                )
                if over_patchers and isinstance(node.target, ast.Name):
                    names.add(node.target.id)
        for node in ast.walk(func):
            if not isinstance(node, ast.Attribute):
                continue
            v = node.value
            if (in_mm and isinstance(v, ast.Attribute) and v.attr == "model") or (
                isinstance(v, ast.Name) and v.id in names
            ):
                found.setdefault(node.attr, set()).add(node.lineno)

    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            visit(node, node.name)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    visit(item, f"{node.name}.{item.name}")
    return found


class _Pack:
    name = "canary"


def test_standin_has_every_member_upstream_reads(comfyui_dir):
    row = {"id": 1, "name": "m", "device": "cuda:0", "size": 1, "resident": 1, "seq": 1}
    standin = StandIn(_Pack(), 1, row)
    missing = {}
    scanned = 0
    for rel in SOURCES:
        path = Path(comfyui_dir) / rel
        assert path.is_file(), f"{rel} moved: update the canary's list of callers"
        for attr, lines in patcher_members(path).items():
            scanned += 1
            if attr in NOT_NEEDED or hasattr(standin, attr):
                continue
            missing.setdefault(attr, []).append(f"{rel}:{min(lines)}")
    assert scanned > 15, "the scan found almost nothing: upstream's shape changed"
    assert not missing, f"upstream reads members the stand-in lacks: {missing}"


def test_canary_catches_a_member_the_standin_lacks(tmp_path):
    fake = tmp_path / "model_management.py"
    fake.write_text(
        "def free_memory(current_loaded_models):\n"
        "    for entry in current_loaded_models:\n"
        "        entry.model.brand_new_member()\n"
    )
    assert "brand_new_member" in patcher_members(fake)
    row = {"id": 1, "name": "m", "device": "cuda:0", "size": 1, "resident": 1, "seq": 1}
    assert not hasattr(StandIn(_Pack(), 1, row), "brand_new_member")

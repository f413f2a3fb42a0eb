"""Drift canary, part (a): every member upstream reads on the patcher of a ledger entry exists on
the stand-in. It scans the REAL upstream source (the tree under test), so a ComfyUI version that
starts touching a new member fails here, not in a user's prompt.

Part (b), behaviour through the real upstream functions, is tests/comfyui/test_memory_bridge.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

from comfy_airlock.host.memory.standin import StandIn

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


def _ignore_report(handle, generation, report):
    """The stand-in's report callback (the ledger's refresh in the product)."""


def test_standin_has_every_member_upstream_reads(comfyui_dir):
    row = {"id": 1, "name": "m", "device": "cuda:0", "size": 1, "resident": 1, "seq": 1}
    standin = StandIn(_Pack(), 1, row, _ignore_report)
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
    assert not hasattr(StandIn(_Pack(), 1, row, _ignore_report), "brand_new_member")


# The worker's interrupt gate (docs/adr/0009) stands in for this global; it works only while
# every interruption function takes it by name inside a `with`, and sets the flag global.
INTERRUPT_FUNCTIONS = (
    "interrupt_current_processing",
    "processing_interrupted",
    "throw_exception_if_processing_interrupted",
)


def test_interruption_checks_take_the_mutex_global_the_worker_gate_replaces(comfyui_dir):
    tree = ast.parse((comfyui_dir / "comfy" / "model_management.py").read_text())
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    module_globals = {
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if hasattr(t, "id")
    }
    assert {"interrupt_processing_mutex", "interrupt_processing"} <= module_globals
    for name in INTERRUPT_FUNCTIONS:
        assert name in funcs, f"upstream no longer defines {name}"
        withs = [w for w in ast.walk(funcs[name]) if isinstance(w, ast.With)]
        guards = [
            item.context_expr.id
            for w in withs
            for item in w.items
            if isinstance(item.context_expr, ast.Name)
        ]
        assert guards == ["interrupt_processing_mutex"], (
            f"{name} no longer takes interrupt_processing_mutex by name ({guards}): the "
            "worker's interrupt gate would not see its checks"
        )


def test_upstream_free_memory_reading_is_still_blind_to_other_processes(comfyui_dir):
    """Tripwire for the reserve (docs/adr/0007, issue 5): on a blind platform the bridge adds
    ``blind_free - true_free`` to what it asks upstream to free. If upstream's
    ``get_free_memory`` ever reads the device's truth itself (NVML), that correction would be
    applied twice and the host would evict far more than needed."""
    tree = ast.parse((comfyui_dir / "comfy" / "model_management.py").read_text())
    fn = next(
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_free_memory"
    )
    names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)}
    truthful = sorted(n for n in names if "nvml" in n.lower() or "device_truth" in n.lower())
    assert not truthful, (
        f"upstream get_free_memory now reads {truthful}: it may already see other processes, "
        "so the bridge's blind-view correction (host/admission.py, host/reserve.py) would be "
        "a double correction; re-derive the reserve before upgrading"
    )
    assert "mem_get_info" in names, "upstream no longer reads torch.cuda.mem_get_info"


def _function(tree: ast.Module, cls_name: str | None, name: str) -> ast.FunctionDef:
    body = tree.body
    if cls_name is not None:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == cls_name).body
    return next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)


def test_model_unload_detaches_without_an_amount(comfyui_dir):
    """Tripwire for ``StandIn.detach`` (docs/adr/0030): upstream's ``LoadedModel.model_unload``
    asks for a part through ``partially_unload(offload_device, memory_to_free)`` and otherwise
    calls ``self.model.detach(unpatch_weights)`` with no amount, so the stand-in unloads whole.
    If upstream starts passing what it wants freed, the stand-in can free only that (and a
    blind platform's over-eviction, ADR 0030, goes): re-read it then."""
    tree = ast.parse((comfyui_dir / "comfy" / "model_management.py").read_text())
    fn = _function(tree, "LoadedModel", "model_unload")
    detaches = [
        c
        for c in ast.walk(fn)
        if isinstance(c, ast.Call)
        and isinstance(c.func, ast.Attribute)
        and c.func.attr == "detach"
        and isinstance(c.func.value, ast.Attribute)
        and c.func.value.attr == "model"
    ]
    assert detaches, "LoadedModel.model_unload no longer calls self.model.detach"
    for c in detaches:
        assert len(c.args) <= 1 and not c.keywords, (
            f"model_unload now calls detach with {ast.unparse(c)}: it may pass the amount "
            "upstream wants freed, which StandIn.detach could honour (ADR 0030)"
        )


def test_loaded_models_filters_on_currently_used(comfyui_dir):
    """Tripwire for seed row 38: upstream's ``loaded_models(only_currently_used=True)`` (what
    ``comfy/controlnet.py`` reloads after an encode) filters on ``LoadedModel.currently_used``,
    which ``LoadedModel.__init__`` sets True; the ledger clears it on every stand-in it
    inserts (host/memory/ledger.py ``insert``). If upstream filters on anything else, a worker
    model may be reloaded by the host's nodes again."""
    tree = ast.parse((comfyui_dir / "comfy" / "model_management.py").read_text())
    fn = _function(tree, None, "loaded_models")
    read = {
        n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)
    }
    assert "only_currently_used" in [a.arg for a in fn.args.args]
    assert "currently_used" in read, (
        "loaded_models(only_currently_used=True) no longer reads currently_used: re-check that "
        "stand-ins stay out of what the controlnet pattern reloads"
    )

"""The functions of ComfyUI's own code a pack replaces when it is imported (ADR 0053).

Many packs change ComfyUI's behaviour by replacing its functions at import: smZNodes replaces
``comfy.samplers.KSampler.sample``; prompt and XY packs replace ``execution.validate_inputs``;
progress and queue packs wrap ``execution.PromptExecutor`` methods. In a worker the pack
replaces them in the worker's copy of ComfyUI: ComfyUI's own sampling, validation and
execution, which run in ComfyUI's process, are unchanged, and the pack's feature silently does
nothing there. comfy-airlock never patches ComfyUI (and could not run the pack's code in it),
so what it can do is say so, once, naming each replaced function.

The rule: before the pack's import, every callable attribute of ComfyUI's modules (and of the
classes they define) is held; after it, the ones that are no longer the same object are the
replacements. Module state that is not callable (flags, lists, dicts a pack fills through
ComfyUI's API, such as ``folder_paths`` or ``NODE_CLASS_MAPPINGS``) is not compared: filling
it is how packs use ComfyUI, not a patch.

One kind of state is the exception: the choice lists ComfyUI's own nodes offer
(:data:`CHOICES`, KSampler's samplers and schedulers). RES4LYF appends its schedulers
(``beta57``, ``bong_tangent``) to ``comfy.samplers.SCHEDULER_NAMES`` at import; natively
ComfyUI's KSampler then offers them, isolated only the pack's own nodes do, and a workflow
that picks one on KSampler fails validation. What a pack adds there is named too.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

# Folders of a ComfyUI tree that hold no ComfyUI code.
_NOT_COMFY = frozenset({"custom_nodes", "isolated_nodes", "tests", "tests-unit", "script_examples"})
#: At most this many names are reported (a pack that replaces more is named with the first).
MAX_NAMES = 20

# Per module: a copy of its namespace, and of the namespace of each class it defines.
Snapshot = dict[str, tuple[dict[str, Any], dict[str, dict[str, Any]]]]


def _is_function_like(value: Any) -> bool:
    return isinstance(value, (staticmethod, classmethod, property)) or callable(value)


def _comfy_modules(comfyui_dir: str) -> list[types.ModuleType]:
    """ComfyUI's imported modules: loaded from inside its tree, not from a custom node's
    folder in it (a prefix test per module: resolving every module's path would cost a
    worker's start hundreds of milliseconds)."""
    roots = tuple({os.path.abspath(comfyui_dir) + os.sep, os.path.realpath(comfyui_dir) + os.sep})
    out = []
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        root = next((r for r in roots if isinstance(path, str) and path.startswith(r)), None)
        if root is not None and path[len(root) :].partition(os.sep)[0] not in _NOT_COMFY:
            out.append(module)
    return out


def snapshot(comfyui_dir: str | None) -> Snapshot:
    """The namespaces of ComfyUI's imported modules and of the classes they define, copied
    (the objects themselves are held: ids could be reused). Copies, not a walk: a worker
    takes this before every pack import."""
    held: Snapshot = {}
    if not comfyui_dir:
        return held
    for module in _comfy_modules(comfyui_dir):
        name = module.__name__
        space = dict(vars(module))
        classes = {
            attr: dict(vars(value))
            for attr, value in space.items()
            if isinstance(value, type) and getattr(value, "__module__", None) == name
        }
        held[name] = (space, classes)
    return held


def replaced(before: Snapshot) -> list[str]:
    """The dotted names of the functions (and classes, methods, properties) in ``before``
    whose object changed since (sorted, at most :data:`MAX_NAMES`)."""
    out = []
    for name, (space, classes) in before.items():
        module = sys.modules.get(name)
        if module is None:
            continue
        out.extend(f"{name}.{attr}" for attr in _changed(space, _vars(module), name))
        for cls_name, cls_space in classes.items():
            cls = space[cls_name]
            changed = _changed(cls_space, _vars(cls), name, dunders=False)
            out.extend(f"{name}.{cls_name}.{attr}" for attr in changed)
    return sorted(out)[:MAX_NAMES]


def _changed(
    old: dict[str, Any], now: dict[str, Any], home: str, dunders: bool = True
) -> list[str]:
    """The function-like entries of ``old`` that ``now`` holds another object for, unless the
    new one was made by the module ``home`` itself: RES4LYF's ``importlib.reload`` of
    ``comfy.k_diffusion.sampling`` makes every function of it anew, from ComfyUI's own code,
    and replaces none (a pack's replacement is defined in the pack's module)."""
    return [
        attr
        for attr, value in old.items()
        if (dunders or not attr.startswith("__"))
        and now.get(attr, value) is not value
        and _is_function_like(value)
        and getattr(now.get(attr), "__module__", None) != home
    ]


def _vars(owner: Any) -> dict[str, Any]:
    try:
        return vars(owner) if owner is not None else {}
    except TypeError:
        return {}


#: ComfyUI's choice lists its own nodes offer, by kind: (module, attribute path) each. One
#: list can hide behind two names (``KSampler.SCHEDULERS`` is ``SCHEDULER_NAMES``).
CHOICES: dict[str, tuple[tuple[str, str], ...]] = {
    "samplers": (
        ("comfy.samplers", "KSAMPLER_NAMES"),
        ("comfy.samplers", "SAMPLER_NAMES"),
        ("comfy.samplers", "KSampler.SAMPLERS"),
    ),
    "schedulers": (
        ("comfy.samplers", "SCHEDULER_NAMES"),
        ("comfy.samplers", "SCHEDULER_HANDLERS"),
        ("comfy.samplers", "KSampler.SCHEDULERS"),
    ),
}


def _choice_items(module: str, path: str) -> list[str] | None:
    """The items of one choice list (a dict's keys), or None when ComfyUI has not imported
    it here or it is not a collection (never imported for this: a worker without ComfyUI)."""
    value: Any = sys.modules.get(module)
    for part in path.split("."):
        value = getattr(value, part, None)
    if not isinstance(value, (list, tuple, dict)):
        return None
    return [str(item) for item in value]


def choices() -> dict[str, list[str]]:
    """Every choice of :data:`CHOICES` as it is now, by kind (before a pack's import)."""
    out: dict[str, list[str]] = {}
    for kind, places in CHOICES.items():
        for module, path in places:
            for item in _choice_items(module, path) or ():
                kept = out.setdefault(kind, [])
                if item not in kept:
                    kept.append(item)
    return out


def choices_added(before: dict[str, list[str]]) -> dict[str, list[str]]:
    """The choices of each kind that are there now and were not in ``before``, in order."""
    now = choices()
    added = {
        kind: [i for i in items if i not in before.get(kind, [])] for kind, items in now.items()
    }
    return {kind: items for kind, items in added.items() if items}

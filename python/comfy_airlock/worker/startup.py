"""What a custom node finds when ComfyUI imports it, reproduced in a worker before the pack's
own import: ComfyUI's ``main.py`` as the program (``__main__.__file__``, ``sys.argv``), the
pack's ``prestartup_script.py`` already run, and ComfyUI's own nodes and builtin extra nodes
(``comfy_extras.*``) already imported, in upstream's order (``main.py``, then
``nodes.init_extra_nodes``).

Packs rely on all three without saying so: ``import comfy`` then ``comfy.samplers...`` works
natively only because ``nodes`` imported ``comfy.samplers`` first; ``comfy_extras.X`` is an
attribute of ``comfy_extras`` only once some builtin extra imported it; a prestartup script
registers the ``folder_paths`` names the nodes then look up. See ADR 0005 (amendment) for
what is reproduced, what is not, and what it costs.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("comfy_airlock.worker")

# What ComfyUI's main.py imports after the prestartup scripts and before init_extra_nodes,
# except ``server``, which is the worker's own stand-in, installed earlier.
_MAIN_IMPORTS = (
    "comfy.utils",
    "execution",
    "protocol",
    "nodes",
    "comfy.model_management",
    "comfyui_version",
    "app.logger",
    "comfy.memory_management",
    "comfy.model_patcher",
)


def as_main_py(comfyui_dir: str, main_file: str | None, argv: list[str] | None) -> None:
    """``__main__.__file__`` and ``sys.argv`` as the host has them (ComfyUI's ``main.py`` and
    its flags), not the worker's module: packs find ComfyUI's directory and read flags
    through them. ``__spec__`` is None as for a script, so that multiprocessing's spawn
    re-imports ``main.py`` in a child, as it would natively, and never starts a worker."""
    main = sys.modules.get("__main__")
    path = os.path.abspath(main_file or os.path.join(comfyui_dir, "main.py"))
    if main is not None:
        main.__file__ = path
        main.__spec__ = None
    sys.argv = list(argv) if argv else [path]


def run_prestartup(pack_dir: str) -> bool | None:
    """The pack's ``prestartup_script.py``, as ComfyUI's ``execute_prestartup_script`` runs it:
    a module named by the script's path, not kept in ``sys.modules``; a failure is logged and
    loading goes on. None when the pack has none."""
    script = os.path.join(pack_dir, "prestartup_script.py")
    if not os.path.isfile(script):
        return None
    start = time.perf_counter()
    try:
        spec = importlib.util.spec_from_file_location(os.path.splitext(script)[0], script)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {script}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as e:
        log.error("Failed to execute startup-script: %s / %s", script, e)
        return False
    log.info("prestartup script %s ran in %.1f s", script, time.perf_counter() - start)
    return True


def has_comfy_requirements() -> bool:
    """Whether this env can import ComfyUI's ``nodes`` (it has ComfyUI's requirements); a
    numpy-only env skips the builtin nodes without trying, and so without a partial import."""
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "safetensors", "PIL"))


def load_comfyui(
    comfyui_dir: str,
    run_async: Callable[[Any], Any],
    comfy_env: bool = True,
    *,
    nodes: bool = True,
) -> dict[str, Any]:
    """ComfyUI's state before custom nodes: ``main.py``'s imports, then what
    ``nodes.init_extra_nodes`` does before the custom nodes (public APIs, builtin extra nodes),
    then ``init_external_custom_nodes``' ``sys.path`` entry. API nodes (``comfy_api_nodes``)
    are not loaded: they cost most of a second more and no pack was seen to need them.
    Only in an env built with ComfyUI's requirements (``comfy_env``, from the env builder),
    where torch, safetensors and PIL are importable, and unless the pack's ``airlock.toml``
    says ``comfy-nodes = false`` (``nodes``; ADR 0060: then only the ``sys.path`` entry, and
    the pack imports what it uses of ComfyUI itself). Returns what was done and how long it
    took (for the log)."""
    start = time.perf_counter()
    done: dict[str, Any] = {"nodes": False, "imports_failed": [], "extras_failed": []}
    if not nodes:
        log.info("ComfyUI's nodes not imported before the pack (comfy-nodes = false)")
    elif comfy_env and has_comfy_requirements():
        for name in _MAIN_IMPORTS:
            try:
                importlib.import_module(name)
            except Exception as e:
                # A pack that needs none of it still loads; one that does fails at its own
                # import, with this line in the log to say why.
                log.warning("ComfyUI's %s did not import in this environment: %s", name, e)
                done["imports_failed"].append(name)
        comfy_nodes = sys.modules.get("nodes")
        if comfy_nodes is not None:
            run_async(comfy_nodes.init_public_apis())
            done["extras_failed"] = run_async(comfy_nodes.init_builtin_extra_nodes())
            done["nodes"] = True
    else:
        log.debug("an env without ComfyUI's requirements: ComfyUI's builtin nodes not loaded")
    # As init_external_custom_nodes does ("remove when custom nodes don't break").
    comfy_pkg = os.path.join(comfyui_dir, "comfy")
    if comfy_pkg not in sys.path:
        sys.path.insert(0, comfy_pkg)
    done["seconds"] = round(time.perf_counter() - start, 3)
    if done["extras_failed"]:
        log.warning(
            "builtin extra nodes that did not import in this env (as ComfyUI would report): %s",
            ", ".join(done["extras_failed"]),
        )
    if done["nodes"]:
        log.info("ComfyUI's nodes loaded in the worker in %.2f s", done["seconds"])
    return done

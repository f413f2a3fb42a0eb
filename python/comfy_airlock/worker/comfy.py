"""The ComfyUI side of a worker: the same ComfyUI source tree, the host's directories and flags,
a stand-in ``server.PromptServer`` whose messages reach the host's UI, and the pack's nodes.

Preloaded by the host (the ``preload`` setting) before the worker connects, so it runs once per
process and again in every new generation. Its configuration is the ``comfy`` setting (JSON),
written by :mod:`comfy_airlock.host.pack` (``IsolatedPack._spawn``).

The host calls :func:`scan` once per pack version (the result is cached by content hash) and
:func:`run` for every node method it forwards; nothing here is imported by the host.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import importlib
import importlib.util
import inspect
import logging
import os
import sys
import threading
import traceback
import types
from typing import Any

from comfy_airlock import host_values, pack_values, settings
from comfy_airlock.comfy_values import register_comfy_codecs
from comfy_airlock.node_surface import (
    FOLDER_ROOTS,
    HIDDEN_PREFIX,
    folder_to_scan,
    python_module,
)
from comfy_airlock.worker import (
    aimdo,
    comfy_patches,
    custom_nodes_name,
    describe,
    host_nodes,
    import_misses,
    interrupts,
    models,
    on_import,
    server_shim,
    startup,
    web_directory,
)
from comfy_airlock.worker import routes as _routes
from comfy_airlock.worker.server_shim import emit_quietly as _emit_quietly
from comfy_airlock.worker.server_shim import encode_preview as _encode_preview

log = logging.getLogger("comfy_airlock.worker")

_CONFIG: dict[str, Any] = settings.get().comfy
_PACK: types.ModuleType | None = None
_PREPARED = False
_NODES: dict[str, type] = {}
_DISPLAY: dict[str, str] = {}
_V3: set[str] = set()
# One instance per host node object (ComfyUI keeps one per node id); bounded so a long session
# that edits its graph a lot does not grow without end.
_INSTANCES: collections.OrderedDict[tuple[str, str], Any] = collections.OrderedDict()
_MAX_INSTANCES = 1024
_LOOP: asyncio.AbstractEventLoop | None = None  # the nodes' (not the server's: ADR 0055)
_LOADING = threading.RLock()
# ``nodes.EXTENSION_WEB_DIRS`` before the pack's import: what the import adds is served too.
_WEB_DIRS_BEFORE: dict[str, str] = {}
# ComfyUI's functions the pack's import replaced in this worker (ADR 0053).
_COMFY_PATCHED: list[str] = []
# What the pack's import added to ComfyUI's own choice lists, by kind (comfy_patches.CHOICES).
_COMFY_CHOICES: dict[str, list[str]] = {}
# A group's packs (ADR 0054), in import order: each one's WEB_DIRECTORY, or its failure.
_MEMBERS: dict[str, dict[str, Any]] = {}
_MEMBER_OF: dict[str, str] = {}  # a group's node id: the member that defines it
# ComfyUI's own node ids (builtin and extras) before any pack imports: a pack never replaces
# them in ``nodes.NODE_CLASS_MAPPINGS``, as ComfyUI's ``ignore`` set keeps them natively.
_COMFYS_OWN: set[str] = set()

# Args that only make sense for the host's server process. Its address (``listen``, ``port``,
# the TLS files) is mirrored: packs build URLs to ComfyUI's own API from it (comfy_mtb fetches
# ``/history``), and a worker never serves on it.
_NOT_MIRRORED = {
    "enable_cors_header",
    "max_upload_size",
    "base_directory",
    "extra_model_paths_config",
    "output_directory",
    "temp_directory",
    "input_directory",
    "user_directory",
    "auto_launch",
    "disable_auto_launch",
    "front_end_version",
    "front_end_root",
    "enable_compress_response_body",
    "database_url",
    "disable_all_custom_nodes",
    "whitelist_custom_nodes",
    "disable_api_nodes",
    "enable_manager",
    "windows_standalone_build",
    "verbose",
    "log_stdout",
}


# --- setup ----------------------------------------------------------------------------------


def _setup() -> None:
    comfyui = _CONFIG.get("comfyui_dir")
    if comfyui:
        # Where the host has it: first, as ComfyUI's own main.py puts its directory first.
        if comfyui not in sys.path:
            sys.path.insert(1, comfyui)
        startup.as_main_py(comfyui, _CONFIG.get("main_file"), _CONFIG.get("argv"))
        _mirror_args(_CONFIG.get("args", {}))
        _mirror_folder_paths(_CONFIG.get("folder_paths"))
    server_shim.install()
    register_comfy_codecs()
    pack_values.install_worker()
    host_values.install_worker()


def _mirror_args(host_args: dict[str, Any]) -> None:
    """The host's flags (``--cpu``, ``--lowvram``, dtype and attention switches…) before any
    ``comfy`` module reads them at import."""
    try:
        import comfy.cli_args as cli_args
    except Exception as e:  # a pack env without ComfyUI's needs still runs numpy-only nodes
        log.debug("comfy.cli_args not importable here: %s", e)
        return
    for key, value in host_args.items():
        if key in _NOT_MIRRORED or not hasattr(cli_args.args, key):
            continue
        current = getattr(cli_args.args, key)
        if isinstance(current, enum.Enum):
            try:
                value = type(current)(value)
            except ValueError:
                continue
        setattr(cli_args.args, key, value)


def _mirror_folder_paths(snapshot: dict[str, Any] | None) -> None:
    if not snapshot:
        return
    try:
        import folder_paths
    except Exception as e:
        log.debug("folder_paths not importable here: %s", e)
        return
    for attr in ("base_path", "models_dir", "output_directory", "temp_directory"):
        if snapshot.get(attr):
            setattr(folder_paths, attr, snapshot[attr])
    for attr in ("input_directory", "user_directory"):
        if snapshot.get(attr):
            setattr(folder_paths, attr, snapshot[attr])
    names = snapshot.get("folder_names_and_paths") or {}
    folder_paths.folder_names_and_paths.clear()
    for name, (paths, exts) in names.items():
        folder_paths.folder_names_and_paths[name] = (list(paths), set(exts))


def _progress_hook(value: Any, total: Any, preview: Any = None, node_id: Any = None) -> None:
    if preview is not None:
        preview = _encode_preview(preview)
    _emit_quietly("progress", (value, total, preview))


# --- the pack -------------------------------------------------------------------------------


def _load_pack() -> None:
    if _PACK is not None:
        return
    # The route lane's thread may ask too (a request that came first): one import.
    with _LOADING:
        if _PACK is None:
            _import_pack()


def _import_pack() -> None:
    global _PACK, _WEB_DIRS_BEFORE
    pack_dir = _CONFIG["pack_dir"]
    members = _CONFIG.get("members") or []
    from comfy_airlock import compat

    compat.add_to_path()  # comfy-env packs import comfy_env (ours unless one is installed)
    _prepare([os.path.join(pack_dir, m) for m in members] or [pack_dir])
    _WEB_DIRS_BEFORE = web_directory.extension_dirs()
    comfy_before = comfy_patches.snapshot(_CONFIG.get("comfyui_dir"))
    choices_before = comfy_patches.choices()
    if members:
        module = _load_members(pack_dir, members)
    else:
        name = _CONFIG.get("module_name") or os.path.basename(pack_dir.rstrip("/"))
        module = _import_folder(name, pack_dir)
        entry = _CONFIG.get("entry")
        if entry:
            with import_misses.noted(pack_dir):
                module = importlib.import_module(f"{name}.{entry}")
        _collect(module, pack_dir)
    _COMFY_PATCHED[:] = comfy_patches.replaced(comfy_before)
    _COMFY_CHOICES.clear()
    _COMFY_CHOICES.update(comfy_patches.choices_added(choices_before))
    _PACK = module
    if "comfy.utils" in sys.modules:
        sys.modules["comfy.utils"].set_progress_bar_global_hook(_progress_hook)
    _into_comfy_mappings()


def _import_folder(name: str, folder: str) -> types.ModuleType:
    """The package in ``folder`` imported as ``name``, as ComfyUI's ``load_custom_node`` does
    (a folder without ``__init__.py``, an opt-in pack's, is a bare package)."""
    init = os.path.join(folder, "__init__.py")
    folder_name = os.path.basename(os.path.normpath(folder))
    if not os.path.isfile(init):
        module = types.ModuleType(name)
        module.__path__ = [folder]  # type: ignore[attr-defined]
        sys.modules[name] = module
        custom_nodes_name.register(folder_name, module)
        return module
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[folder])
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the pack at {folder}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    custom_nodes_name.register(folder_name, module)
    try:
        with import_misses.noted(folder):
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        custom_nodes_name.unregister(folder_name)
        raise
    return module


def _load_members(group_dir: str, members: list[str]) -> types.ModuleType:
    """A group's packs (ADR 0054), each imported as ComfyUI imports a custom node folder, in
    order, its nodes in ``nodes.NODE_CLASS_MAPPINGS`` before the next one imports (a pack that
    looks for another at import finds it, as natively). A member that fails is named in the
    scan with its traceback, and the others load, as ComfyUI goes on past a pack that fails; the
    group fails only when every member does. Returns the first member that imported."""
    first: types.ModuleType | None = None
    failed: BaseException | None = None
    for member in members:
        folder = os.path.join(group_dir, member)
        try:
            module = _import_folder(member, folder)
            if hasattr(module, "NODE_CLASS_MAPPINGS") or hasattr(module, "comfy_entrypoint"):
                _collect(module, folder, member)
            else:  # natively skipped with this warning, its web folder still served
                log.warning(
                    "Skip %s module for custom nodes due to the lack of NODE_CLASS_MAPPINGS or "
                    "comfy_entrypoint (need one).",
                    folder,
                )
        except Exception as e:
            failed = failed or e
            # As the scan cache records a pack's failure; the host logs it.
            text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            failure = {"error": str(e), "type": type(e).__qualname__, "traceback": text}
            _MEMBERS[member] = {"web_directory": None, "failed": failure}
            continue
        _MEMBERS[member] = {
            "web_directory": web_directory.read(module, None),
            "failed": None,
        }
        first = first or module
        _into_comfy_mappings()
    if first is None:
        assert failed is not None
        raise failed
    return first


def _into_comfy_mappings() -> None:
    """The pack's nodes in ``nodes.NODE_CLASS_MAPPINGS``, as ComfyUI adds them after importing
    a pack (never over one of its own nodes; over an earlier pack's of a group, as a later
    pack's replaces it natively): a node that looks up another of its pack's classes there at
    run time finds it. Other packs' nodes are asked of the host by name
    (worker/host_nodes.py)."""
    comfy_nodes = sys.modules.get("nodes")
    mappings = getattr(comfy_nodes, "NODE_CLASS_MAPPINGS", None)
    if not isinstance(mappings, dict):
        return
    if not _COMFYS_OWN:  # `comfy-nodes = false`: ComfyUI's `nodes` imported after the start
        _COMFYS_OWN.update(n for n in mappings if n not in _NODES)
    for node_id, cls in _NODES.items():
        if node_id not in _COMFYS_OWN:
            mappings[node_id] = cls
    display = getattr(comfy_nodes, "NODE_DISPLAY_NAME_MAPPINGS", None)
    if isinstance(display, dict):
        display.update(_DISPLAY)


def _prepare(pack_dirs: list[str]) -> None:
    """What ComfyUI has done natively before it imports a custom node (every pack's prestartup
    script, then its own nodes); once, even if the pack's import fails and is retried."""
    global _PREPARED
    if _PREPARED:
        return
    _PREPARED = True
    for pack_dir in pack_dirs:
        startup.run_prestartup(pack_dir)
    if _CONFIG.get("comfyui_dir"):
        startup.load_comfyui(
            _CONFIG["comfyui_dir"],
            _run_async,
            _CONFIG.get("comfy_requirements", True),
            nodes=_CONFIG.get("comfy_nodes", True),
        )
        level = (_CONFIG.get("args") or {}).get("verbose") or "INFO"
        aimdo.start(bool(_CONFIG.get("aimdo")), str(level))  # as main.py, when the host runs it
        host_nodes.install()  # other packs' nodes, looked up by name (worker/host_nodes.py)
        if not _CONFIG.get("comfy_nodes", True):
            # ComfyUI's `nodes`, imported by the pack when it likes (ADR 0060), holds the
            # pack's nodes from then on, as natively.
            on_import.after_import("nodes", lambda _nodes: _into_comfy_mappings())
    _COMFYS_OWN.update(getattr(sys.modules.get("nodes"), "NODE_CLASS_MAPPINGS", None) or ())


def _collect(module: types.ModuleType, pack_dir: str, member: str | None = None) -> None:
    # As ComfyUI's load_custom_node does: the frontend groups nodes by it.
    relative = python_module(pack_dir)
    mappings = getattr(module, "NODE_CLASS_MAPPINGS", None)
    if mappings is not None:
        for node_id in mappings:
            if node_id in _NODES:  # natively too: the later pack's class replaces the earlier
                log.warning("node %r of pack %r replaces an earlier pack's", node_id, member)
        _NODES.update(mappings)
        for node_id, cls in mappings.items():
            if member is not None:
                _MEMBER_OF[node_id] = member
            _V3.discard(node_id)  # an earlier member's node of that id was replaced
            _set_module(cls, relative)
            if _is_v3(cls):  # a V3 class in V1 mappings: ComfyUI describes and runs it as V3
                _V3.add(node_id)
        _DISPLAY.update(getattr(module, "NODE_DISPLAY_NAME_MAPPINGS", None) or {})
        return
    entrypoint = getattr(module, "comfy_entrypoint", None)
    if entrypoint is None:
        raise ImportError(
            f"pack {member or _CONFIG.get('pack_name')!r} defines neither NODE_CLASS_MAPPINGS "
            "nor comfy_entrypoint"
        )

    async def load() -> list[type]:
        ext = entrypoint()
        if inspect.isawaitable(ext):
            ext = await ext
        await ext.on_load()
        return await ext.get_node_list()

    for cls in _run_async(load()):
        schema = cls.GET_SCHEMA()
        _NODES[schema.node_id] = cls
        _V3.add(schema.node_id)
        if member is not None:
            _MEMBER_OF[schema.node_id] = member
        _set_module(cls, relative)
        if schema.display_name is not None:
            _DISPLAY[schema.node_id] = schema.display_name


def _is_v3(cls: Any) -> bool:
    base = getattr(sys.modules.get("comfy_api.internal"), "_ComfyNodeInternal", None)
    return base is not None and isinstance(cls, type) and issubclass(cls, base)


def _set_module(cls: Any, relative: str) -> None:
    try:
        cls.RELATIVE_PYTHON_MODULE = relative
    except (AttributeError, TypeError) as e:  # the scan reports an odd node by name
        log.debug("RELATIVE_PYTHON_MODULE not set on %r: %s", cls, e)


def _run_async(coro: Any) -> Any:
    """At import: on the server's loop, as ComfyUI runs ``init_extra_nodes`` (the pack's
    import holds ``_LOADING``, so the route lane's thread does not run that loop meanwhile)."""
    return server_shim.event_loop().run_until_complete(coro)


def warm() -> None:
    """Imports the pack now (a worker started ahead of its first node: host/prestart.py)."""
    _load_pack()


def loaded_nodes() -> tuple[dict[str, type], set[str]]:
    """The pack's node classes by id, and the ids of its V3 ones (the pack imported first)."""
    _load_pack()
    return _NODES, _V3


# --- scan -----------------------------------------------------------------------------------


def scan() -> dict[str, Any]:
    """Every node of the pack, as the host needs it to build proxies; the nodes ComfyUI could
    not describe either, by name with the reason; the ``folder_paths`` names the pack
    registered (its prestartup script or its import), for the host to register too."""
    _load_pack()
    models.publish()
    nodes: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    retry: list[str] = []  # skipped because the pack's code raised: asked again next start
    for node_id, cls in _NODES.items():
        try:
            meta = describe.describe(node_id, cls, node_id in _V3)
        except describe.OddNode as e:
            skipped[node_id] = str(e)
            if e.raised:
                retry.append(node_id)
            continue
        meta["display_name"] = _DISPLAY.get(node_id)
        if node_id in _MEMBER_OF:
            meta["member"] = _MEMBER_OF[node_id]
        nodes[node_id] = meta
    return {
        "nodes": nodes,
        "skipped": skipped,
        "retry": retry,
        "folders": _added_folders(),
        "routes": _routes.describe(),
        "on_prompt": len(server_shim.PromptServer.instance.on_prompt_handlers),
        "web_directory": None if _MEMBERS else web_directory.read(_PACK, _CONFIG.get("entry")),
        "members": dict(_MEMBERS),
        "extension_web_dirs": web_directory.added(_WEB_DIRS_BEFORE),
        "comfy_patches": list(_COMFY_PATCHED),
        "comfy_choices": dict(_COMFY_CHOICES),
        "went_without": import_misses.went_without(),
    }


def on_prompt(json_data: Any) -> Any:
    """The pack's ``add_on_prompt_handler`` functions on one ``POST /prompt`` body, in order,
    as upstream's ``trigger_on_prompt`` runs them (one that raises is logged and skipped)."""
    _load_pack()
    return server_shim.PromptServer.instance.trigger_on_prompt(json_data)


def _added_folders() -> dict[str, Any]:
    """``folder_paths`` entries that differ from the host's snapshot this worker started with."""
    fp = sys.modules.get("folder_paths")
    if fp is None:
        return {}
    before = (_CONFIG.get("folder_paths") or {}).get("folder_names_and_paths") or {}
    roots = {name: getattr(fp, name, None) for name in FOLDER_ROOTS}
    added = {}
    for name, (paths, exts) in fp.folder_names_and_paths.items():
        old = before.get(name)
        if old is None or list(paths) != list(old[0]) or set(exts) != set(old[1]):
            added[name] = [[folder_to_scan(p, roots) for p in paths], sorted(exts)]
    return added


# --- calls ----------------------------------------------------------------------------------


def _keep_results(out: Any) -> Any:
    """A node's outputs as they cross: values that cannot (the pack's own objects, models)
    stay here and their references go instead (ADR 0023)."""
    if isinstance(out, dict):
        if "result" in out:
            out = dict(out)
            out["result"] = pack_values.keep_unsendable(out["result"])
        return out
    if isinstance(out, (tuple, list)):
        return tuple(pack_values.keep_unsendable(tuple(out)))
    return out


def _instance(node_id: str, key: str) -> Any:
    k = (node_id, key)
    obj = _INSTANCES.get(k)
    if obj is None:
        obj = _NODES[node_id]()
        _INSTANCES[k] = obj
        if len(_INSTANCES) > _MAX_INSTANCES:
            _INSTANCES.popitem(last=False)
    else:
        _INSTANCES.move_to_end(k)
    return obj


def _await(value: Any) -> Any:
    """A node's coroutine, run to its end on the nodes' own loop: upstream's executor runs a
    prompt's nodes apart from the server's loop, which here serves the pack's routes on
    another thread, maybe at this very time (ADR 0055)."""
    global _LOOP
    if not inspect.isawaitable(value):
        return value
    if _LOOP is None:
        _LOOP = asyncio.new_event_loop()
    return _LOOP.run_until_complete(value)


def _hidden_v3(kwargs: dict[str, Any], declared: Any) -> dict[Any, Any]:
    """The hidden values the host sent (under ``HIDDEN_PREFIX``: an ordinary input may bear a
    hidden one's name, an input called ``prompt`` beside hidden PROMPT), for the names the
    node declares hidden."""
    from comfy_api.latest import io

    hidden = {}
    for h in io.Hidden:
        value = kwargs.pop(HIDDEN_PREFIX + h.name, None)
        if h.name in (declared or {}):
            hidden[h] = value
    return hidden


def _run_v3(node_id: str, method: str, kwargs: dict[str, Any]) -> Any:
    from comfy_api.latest import _io

    cls = _NODES[node_id]
    input_types = cls.INPUT_TYPES()
    hidden = _hidden_v3(kwargs, input_types.get("hidden"))
    _, _, v3_data = _io.get_finalized_class_inputs(input_types, kwargs)
    v3_data["hidden_inputs"] = hidden
    clone = cls.PREPARE_CLASS_CLONE(v3_data)
    if method == "execute":
        fn = clone.EXECUTE_NORMALIZED_ASYNC if inspect.iscoroutinefunction(cls.execute) else None
        kwargs = _io.build_nested_inputs(kwargs, v3_data)
        out = _await(fn(**kwargs)) if fn else clone.EXECUTE_NORMALIZED(**kwargs)
        result: dict[str, Any] = {}
        if out.block_execution is not None:
            from comfy_execution.graph_utils import ExecutionBlocker

            n = len(cls.GET_SCHEMA().outputs)
            result["result"] = tuple(ExecutionBlocker(out.block_execution) for _ in range(n))
        elif out.result is not None:
            result["result"] = _keep_results(tuple(out.result))
        if out.ui is not None:
            result["ui"] = out.ui.as_dict() if hasattr(out.ui, "as_dict") else out.ui
        if out.expand is not None:
            result["expand"] = out.expand
        return result
    name = {"IS_CHANGED": "fingerprint_inputs", "VALIDATE_INPUTS": "validate_inputs"}.get(
        method, method
    )
    return _await(getattr(clone, name)(**kwargs))


def serve_route(request: dict[str, Any]) -> dict[str, Any]:
    """One HTTP request the host forwarded to the pack's routes (host/routes.py's call target):
    the pack is imported first, as a first node call would."""
    _load_pack()
    return _routes.serve(request)


def run(node_id: str, key: str, method: str, kwargs: dict[str, Any]) -> Any:
    """Runs ``method`` of node ``node_id`` (its FUNCTION, IS_CHANGED, VALIDATE_INPUTS or
    check_lazy_status) with the host's arguments."""
    _load_pack()
    interrupts.begin_call()
    try:
        return _run(node_id, key, method, kwargs)
    finally:
        interrupts.end_call()


def _run(node_id: str, key: str, method: str, kwargs: dict[str, Any]) -> Any:
    if node_id not in _NODES:
        raise KeyError(f"the pack has no node {node_id!r} (its code changed since the scan?)")
    if node_id in _V3:
        return _run_v3(node_id, method, kwargs)
    cls = _NODES[node_id]
    if method in ("IS_CHANGED", "VALIDATE_INPUTS"):
        return _await(getattr(cls, method)(**kwargs))
    out = _await(getattr(_instance(node_id, key), method)(**kwargs))
    if method == "check_lazy_status":
        return out
    return _keep_results(_v1_form(out, len(getattr(cls, "RETURN_TYPES", ()) or ())))


def _v1_form(out: Any, n_outputs: int) -> Any:
    """A V1 node may return a V3 ``io.NodeOutput`` (upstream's execution takes it from any
    node): its V1 dict, as upstream's ``get_output_from_returns`` reads it."""
    try:
        from comfy_api.internal import _NodeOutputInternal
    except Exception:
        return out
    if not isinstance(out, _NodeOutputInternal):
        return out
    v1: dict[str, Any] = {}
    if out.ui is not None:
        v1["ui"] = out.ui if isinstance(out.ui, dict) else out.ui.as_dict()
    result = out.result
    if out.block_execution is not None and (out.expand is not None or result is not None):
        from comfy_execution.graph_utils import ExecutionBlocker

        result = tuple(ExecutionBlocker(out.block_execution) for _ in range(n_outputs))
    if out.expand is not None:
        v1["expand"] = out.expand
        v1["result"] = result
    elif result is not None:
        v1["result"] = result
    return v1


_setup()

"""Finding isolated packs, building or checking their environments, and turning their nodes
into proxies. A pack that cannot be set up registers nothing and says why; the others, and
ComfyUI, carry on. Nothing here ever imports a pack's code into the host."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from comfy_airlock import env as _env
from comfy_airlock import isolated_toml, settings, undeclared
from comfy_airlock.compat import root_config
from comfy_airlock.host import (
    comfy_state,
    on_prompt,
    prestart,
    routes,
    scan_cache,
    web_dirs,
    workflow_templates,
)
from comfy_airlock.host.memory.ledger import LEDGER, ledger_rows
from comfy_airlock.host.memory.ram import RAM
from comfy_airlock.host.pack import EXITING, IsolatedPack
from comfy_airlock.host.proxies import build_proxy

log = logging.getLogger("comfy_airlock")

Mappings = tuple[dict[str, type], dict[str, str]]

_PACKS: dict[str, IsolatedPack] = {}
_FAILED: dict[str, dict[str, Any]] = {}
_LOCK = threading.Lock()


def airlock_home() -> Path:
    """Where environments, logs and the scan cache live (the ``home`` setting, else the XDG
    data directory); the same rule as the env builder's."""
    home = settings.get().home
    if home:
        return Path(home)
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local/share")
    return Path(data, "comfy-airlock")


def _fail(name: str, dir_: str, reason: str, cause: str, **extra: Any) -> Mappings:
    """Reports a pack that is not loaded. ``cause`` says which step failed ("config",
    "placement", "env", "sandbox", "import", "worker"); the row of ``/airlock/workers`` has it
    and, for an import, the worker's traceback, as the log does."""
    log.error("[comfy-airlock] pack %r is not loaded: %s", name, reason)
    row = {"pack": name, "dir": dir_, "state": "failed", "cause": cause, "error": reason, **extra}
    with _LOCK:
        _FAILED[name] = row
    return {}, {}


def _env_cause(e: BaseException) -> str:
    return "config" if isinstance(e, _env.ConfigError) else "env"


def _scan_failed(name: str, dir_: str, failure: dict[str, Any], cached: str | None) -> Mappings:
    reason = f"its nodes could not be read in its worker: {scan_cache.describe(failure)}"
    # An import the pack relies on ComfyUI's environment for (ADRs 0049, 0050).
    hint = undeclared.hint_of_failure(failure, _env.config_file(dir_))
    if hint:
        head, _, tb = reason.partition("\n")
        reason = f"{head}\n{hint}" + (f"\n{tb}" if tb else "")
    if cached:
        reason += (
            f"\n(cached failure from an earlier start, {cached}: the pack is imported again "
            f"once it or its environment changes, or with {settings.ENV['rescan']}=1)"
        )
    return _fail(name, dir_, reason, "import", traceback=failure.get("traceback"))


def _refresh_isolated_toml(pack_dir: str, name: str) -> bool:
    """The airlock.toml ``airlock isolate`` wrote, made again from the pack's requirements when
    the pack was updated since (ADR 0059); what changed is logged. True when it was written
    again now."""
    done = isolated_toml.refresh_before_env(Path(pack_dir), name)
    for notice in done.notices:
        log.warning("[comfy-airlock] pack %r: %s", name, notice)
    return done.rewritten


# Said when an environment fails right after its airlock.toml was written again.
_REWRITTEN = (
    "(its airlock.toml was written again at this start from the pack's changed requirements, "
    "see the warning above, and the environment it had before is not used: pin versions that "
    "resolve in {file}, which is then left as you edit it, or put the pack back at its earlier "
    "version)"
)


def load_pack(pack_dir: str, name: str | None = None, config: str | None = None) -> Mappings:
    """Sets up one pack: its environment (built when missing, unless ``auto_build`` is off),
    its node metadata (from the scan cache, else a scan in its worker), and its proxies.
    ``config``: one of a comfy-env pack's configs, each its own env (``<pack>/<sub>``)."""
    pack_dir = os.path.abspath(pack_dir)
    name = name or os.path.basename(pack_dir.rstrip("/"))
    comfyui = comfy_state.comfyui_dir()
    rewritten = config is None and _refresh_isolated_toml(pack_dir, name)
    try:
        info = _env.ensure_env(
            pack_dir,
            comfyui_dir=comfyui,
            host_python=sys.executable,
            build=settings.get().auto_build,
            progress=lambda line: log.info("[comfy-airlock] %s", line),
            config=config,
        )
    except Exception as e:
        reason = str(e)
        if rewritten:
            file = Path(pack_dir) / isolated_toml.AIRLOCK_TOML
            reason += "\n" + _REWRITTEN.format(file=file)
        return _fail(name, pack_dir, reason, _env_cause(e))
    for notice in info.get("notices") or ():
        log.warning("[comfy-airlock] pack %r: %s", name, notice)
    pack = IsolatedPack.from_env(name, pack_dir, info)
    try:
        # A sandbox this kernel cannot enforce is the pack's setup problem, said now.
        pack.sandbox_rules(comfyui, comfy_state.folder_paths_snapshot())
    except Exception as e:
        return _fail(name, pack_dir, str(e), "sandbox")
    meta = _read_nodes(pack, comfyui)
    if meta is None:
        return {}, {}
    retry = meta.get("retry") or ()
    for node_id, why in (meta.get("skipped") or {}).items():
        again = " (asked again at ComfyUI's next start)" if node_id in retry else ""
        log.error("[comfy-airlock] pack %r: node %r skipped: %s%s", name, node_id, why, again)
    for member, m in (meta.get("members") or {}).items():
        failure = m.get("failed")
        if failure:
            hint = undeclared.hint_of_failure(failure, _env.config_file(pack_dir))
            log.error(
                "[comfy-airlock] pack %r of group %r failed to import; the group's other packs "
                "load without it:\n%s%s",
                member,
                name,
                failure["traceback"],
                f"{hint}\n" if hint else "",
            )
    for folder in comfy_state.add_folders(meta.get("folders")):
        log.info("[comfy-airlock] pack %r registered the model folder %r", name, folder)
    mappings: dict[str, type] = {}
    display: dict[str, str] = {}
    for node_id, node_meta in meta["nodes"].items():
        try:
            mappings[node_id] = build_proxy(pack, node_id, node_meta)
        except Exception as e:
            log.error("[comfy-airlock] pack %r: node %r skipped: %s", name, node_id, e)
            continue
        if node_meta.get("display_name"):
            display[node_id] = node_meta["display_name"]
    with _LOCK:
        old = _PACKS.pop(name, None)
        _PACKS[name] = pack
        _FAILED.pop(name, None)
    routes.remember(pack, meta.get("routes") or [])
    on_prompt.install(pack, set(mappings), int(meta.get("on_prompt") or 0))
    web_dirs.remember(
        name,
        pack_dir,
        meta.get("web_directory"),
        meta.get("extension_web_dirs") or {},
        {m: v.get("web_directory") for m, v in (meta.get("members") or {}).items()},
    )
    patched = meta.get("comfy_patches") or []
    if patched:
        log.warning("[comfy-airlock] %s", scan_cache.patches_note(name, patched))
    if meta.get("comfy_choices"):
        log.warning("[comfy-airlock] %s", scan_cache.choices_note(name, meta["comfy_choices"]))
    members = meta.get("members") or {}
    loaded = [os.path.join(pack_dir, m) for m, v in members.items() if not v.get("failed")]
    for folder in loaded or [pack_dir]:
        workflow_templates.remember(name, folder)
    prestart.remember(pack, mappings)
    if old is not None:
        old.close()
    log.info("[comfy-airlock] pack %r: %d node(s) isolated in %s", name, len(mappings), pack.python)
    prestart.start_with_comfyui([pack])
    return mappings, display


def _read_nodes(pack: IsolatedPack, comfyui: str | None) -> dict[str, Any] | None:
    """The pack's node metadata: cached, else scanned in its worker (and cached, a failure of
    its own code too). None: it failed, and said so."""
    cache_dir = airlock_home() / "scans"
    try:
        key = scan_cache.key(pack.dir, pack.env_key, comfyui)
    except OSError as e:
        _fail(pack.name, pack.dir, f"its files cannot be read: {e}", "config")
        return None
    meta = scan_cache.load(cache_dir, key)
    if meta is not None and "failed" in meta and not scan_cache.rescan_forced():
        where = str(scan_cache.path(cache_dir, key))
        _scan_failed(pack.name, pack.dir, meta["failed"], where)
        return None
    # A scan that skipped nodes because their INPUT_TYPES (or schema) raised is read again
    # at each start, as natively ComfyUI asks again at each /object_info; kept in the cache
    # meanwhile for `airlock doctor`.
    if meta is None or "failed" in meta or meta.get("retry"):
        earlier = meta if meta is not None and "failed" not in meta else None
        try:
            meta = pack.scan()
        except Exception as e:
            pack.close()
            failure = scan_cache.failure_of(e)
            if failure is None:  # not the pack's code: the next start tries again
                reason = f"its worker could not read its nodes: {type(e).__name__}: {e}"
                if earlier is not None:
                    # Asked again only for the nodes that raised: the others are as an earlier
                    # start read them, as a pack with nothing to ask again gets them.
                    log.warning(
                        "[comfy-airlock] pack %r: %s; the nodes an earlier start read are "
                        "listed (asked again at ComfyUI's next start)",
                        pack.name,
                        reason,
                    )
                    return earlier
                _fail(pack.name, pack.dir, reason, "worker")
                return None
            scan_cache.store(cache_dir, key, {"failed": failure})
            _scan_failed(pack.name, pack.dir, failure, None)
            return None
        scan_cache.store(cache_dir, key, meta)
        _note_went_without(pack, meta)
    return meta


def _note_went_without(pack: IsolatedPack, meta: dict[str, Any]) -> None:
    """What a fresh scan's import went on without, which its own files import and ComfyUI's
    environment has (ADR 0057): said at the start that read the pack, as ``airlock isolate``
    says it, for a pack placed by hand or updated since (its cached starts say nothing)."""
    modules = meta.get("went_without") or []
    if not modules:
        return
    providers = {m: undeclared.provider_here(m) for m in modules}
    note = undeclared.went_without_note(pack.name, providers, _env.config_file(pack.dir))
    if note:
        log.warning("[comfy-airlock] %s", note)


def load_isolated_packs(base_dir: str | None = None) -> Mappings:
    """Every pack under ``<base>/isolated_nodes/`` (and the ``packs_path`` setting), set up in
    parallel. Packs with an ``airlock.toml`` in ``custom_nodes/`` are ComfyUI's to import: they
    register themselves with :func:`register_nodes`, or get a clear message."""
    base = base_dir or comfy_state.base_dir()
    if base is None:
        raise RuntimeError("load_isolated_packs() must run inside ComfyUI (no folder_paths)")
    found = _env.discover_packs(base)
    todo = []
    for d in found:
        if d.get("error"):
            _fail(d["name"], d["dir"], d["error"], "config")
        elif d["placement"] == "custom_nodes":
            if not d["opted_in"]:
                _fail(
                    d["name"],
                    d["dir"],
                    "it has an airlock.toml but sits in custom_nodes/, where ComfyUI imports it "
                    "in-process. Move it to isolated_nodes/, or make its __init__.py call "
                    "comfy_airlock.register_nodes()",
                    "placement",
                )
        elif d["placement"] == "managed":
            why = root_config.prepare_managed(d)  # comfy-env packs: codecs, peers, folders
            if why:
                _fail(d["name"], d["dir"], why, "config")
            else:
                todo.append(d)
    mappings: dict[str, type] = {}
    display: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(4, len(todo)))) as pool:
        for m, dn in pool.map(lambda d: load_pack(d["dir"], d["name"], _config_file(d)), todo):
            for node_id in m:
                if node_id in mappings:
                    log.error("[comfy-airlock] node %r is defined by two packs", node_id)
            mappings.update(m)
            display.update(dn)
    _register_routes()
    return mappings, display


def _config_file(d: dict[str, Any]) -> str | None:
    """The comfy-env config a discovered env comes from (comfy-env packs have one per file)."""
    c = d.get("config") or {}
    return c.get("file") if c.get("format") == "comfy-env.toml" else None


def register_nodes(path: str) -> Mappings:
    """For a pack's own ``__init__.py`` in ``custom_nodes/``::

        from comfy_airlock import register_nodes
        NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS = register_nodes(__file__)

    In ComfyUI this isolates the pack (its ``entry`` module runs only in its worker); inside
    the worker it returns nothing, since the worker imports the pack's nodes itself."""
    if settings.get().worker:
        return {}, {}
    pack_dir = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    if os.path.isfile(os.path.join(pack_dir, "prestartup_script.py")):
        log.warning(
            "[comfy-airlock] pack %r: ComfyUI has run its prestartup_script.py in its own "
            "process (it runs every custom_nodes/*/prestartup_script.py before any node loads); "
            "its worker runs it too. Move the pack to isolated_nodes/ to keep it out",
            os.path.basename(pack_dir),
        )
    result = load_pack(pack_dir)
    _register_routes()
    return result


def status() -> list[dict[str, Any]]:
    """One row per pack: its worker (pid, generation, Python, memory, calls) or why it failed."""
    with _LOCK:
        packs = list(_PACKS.values())
        failed = list(_FAILED.values())
    return [p.status() for p in packs] + failed


def pack(name: str) -> IsolatedPack | None:
    """The loaded pack called ``name``; None when it is not loaded (or failed)."""
    with _LOCK:
        return _PACKS.get(name)


def memory_status() -> dict[str, Any]:
    """Workers with what they hold, and ComfyUI's own ledger (host models and stand-ins)."""
    workers = status()
    for w in workers:
        report = LEDGER.last_report(w["pack"]) or {}
        rows = report.get("models") or []
        w["held"] = sum(int(r["resident"]) for r in rows if r["device"] != "cpu")
        w["reserved"] = report.get("reserved")
        w["floor"] = report.get("floor")
        w["rss"] = report.get("rss")
    return {"workers": workers, "ledger": ledger_rows(), "ram": dict(RAM.state)}


_ROUTES_DONE = False


def _register_routes() -> None:
    global _ROUTES_DONE
    routes.mount_pending()
    web_dirs.mount_pending()
    workflow_templates.mount_pending()
    prestart.add_handler()
    server = sys.modules.get("server")
    instance = getattr(getattr(server, "PromptServer", None), "instance", None)
    if _ROUTES_DONE or instance is None:
        return
    _ROUTES_DONE = True
    from aiohttp import web

    # Both read native worker handles, which wait while a worker is being spawned: off the
    # event loop, so a spawn never stalls ComfyUI's server (its websocket, its other routes).
    @instance.routes.get("/airlock/workers")
    async def _workers(request: Any) -> Any:
        return web.json_response(await asyncio.to_thread(status))

    @instance.routes.get("/airlock/status")
    async def _status(request: Any) -> Any:
        return web.json_response(await asyncio.to_thread(memory_status))

    # What GET /extensions would list of isolated packs (web/isolated_extensions.js reads it).
    @instance.routes.get("/airlock/extensions")
    async def _extensions(request: Any) -> Any:
        return web.json_response(web_dirs.listing())


# How long an idle worker may take to exit when ComfyUI does, before it is killed.
_EXIT_GRACE_S = 1.0


@atexit.register
def _close_all() -> None:
    """ComfyUI is exiting (Ctrl-C ends main.py): every worker stops now, all at once. One
    running a node is killed at once: nothing will read its result, and its call lane is busy,
    so it would not hear a request to exit. An idle one is asked, and killed after
    ``_EXIT_GRACE_S``. Either way its process group and temp dir are gone when this returns."""
    with _LOCK:
        packs = [p for p in _PACKS.values() if p.alive()]
    if not packs:
        return
    EXITING.set()  # a node call whose worker is stopped now does not return (pack.py)
    t0 = time.monotonic()
    stoppers = [
        threading.Thread(target=_stop, args=(p,), name=f"airlock-stop-{p.name}", daemon=True)
        for p in packs
    ]
    for t in stoppers:
        t.start()
    deadline = t0 + _EXIT_GRACE_S + 1.0
    for t in stoppers:
        t.join(max(0.0, deadline - time.monotonic()))
    log.info("[comfy-airlock] %d worker(s) stopped in %.2f s", len(packs), time.monotonic() - t0)


def _stop(pack: IsolatedPack) -> None:
    with contextlib.suppress(Exception):
        pack.close(grace=0.0 if pack.busy else _EXIT_GRACE_S)

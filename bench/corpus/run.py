"""The real-pack corpus: each public pack loaded by the real ComfyUI natively and isolated, as
a user would (issue 14's acceptance), and compared.

    .venv/bin/python -m bench.corpus.run /work/corpus/packs [--only NAME ...] \
        [--work /work/corpus/runs] [--commits /work/corpus/commits.json]

For each pack (a folder under the packs directory, never written to):

1. **Isolated, as a user does it**: the pack is copied into a base directory's
   ``custom_nodes/`` and ``airlock isolate`` is run on it (it writes ``airlock.toml`` from
   ``requirements.txt``, builds the environment, reads the nodes in the worker). When it
   refuses, the pack is put in ``isolated_nodes/`` with the ``airlock.toml`` that
   ``isolate`` would have written, and ComfyUI is started anyway, to see what it says.
2. **Native**: another copy in another base directory's ``custom_nodes/``, run by a venv with
   the very packages of the pack's environment (``envs.py``), plus the probe pack.
3. Both servers up: ``/object_info`` of the pack's nodes, its routes (and the answers to its
   GET routes without match info), its JS files (``/extensions``), and every node run with
   generated inputs (``inputs.py``) on both, outputs compared through ``CorpusDigest``.

Raw results: ``bench/corpus/results/<pack>.json``; ``report.py`` makes the summary table.
Packs, environments and server logs stay under ``--work`` (outside the repository).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.corpus import compare, envs  # noqa: E402
from bench.corpus.inputs import NotRunnable, node_prompt, producers  # noqa: E402
from bench.corpus.side import Side  # noqa: E402
from tests.comfyui.harness import DEFAULT_COMFYUI_DIR, make_base_dir  # noqa: E402

PROBE = REPO / "bench" / "corpus" / "probe"
PROBE_NAME = "airlock-corpus-probe"
RESULTS = REPO / "bench" / "corpus" / "results"
HOST_PYTHON = str(REPO / ".venv" / "bin" / "python")
UV = str(REPO / ".venv" / "bin" / "uv")
# Both sides: no model download (none is reachable here anyway; this fails fast); one hash
# seed, so that a set's order is the same in every process (VideoHelperSuite lists file
# extensions from a set: natively that order changes from one start to the next).
COMMON_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONHASHSEED": "0"}


def _copy(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", ".git"))


def isolate_as_user(pack: Path, base: Path, comfyui: Path, env: dict[str, str]) -> dict:
    """``airlock isolate`` on a copy of the pack in ``base``; when it refuses, the pack goes to
    ``isolated_nodes/`` with the config ``isolate`` would have written."""
    _copy(pack, base / "custom_nodes" / pack.name)
    t0 = time.monotonic()
    cmd = [HOST_PYTHON, "-m", "comfy_airlock.cli", "isolate", pack.name]
    cmd += ["--comfyui", str(comfyui), "--base", str(base)]
    proc = subprocess.run(
        cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=7200
    )
    out = {
        "rc": proc.returncode,
        "seconds": round(time.monotonic() - t0, 1),
        "output": (proc.stdout + proc.stderr)[-6000:],
    }
    moved = base / "custom_nodes" / pack.name
    if moved.exists():  # isolate refused and put it back: place it by hand
        dst = base / "isolated_nodes" / pack.name
        shutil.move(str(moved), str(dst))
        out["placed_by_hand"] = _write_config(dst)
    toml = base / "isolated_nodes" / pack.name / "airlock.toml"
    out["airlock_toml"] = toml.read_text() if toml.is_file() else None
    return out


def _write_config(dst: Path) -> str:
    from comfy_airlock import isolated_toml, pack_requirements

    try:
        needs = pack_requirements.read_pack_needs(dst)
    except pack_requirements.RequirementsError as e:
        return f"requirements not readable ({e}): no airlock.toml written"
    isolated_toml.write_toml(dst, dst.name, needs, {})
    return "airlock.toml written as isolate writes it"


def env_python(pack_dir: Path, comfyui: Path, home: str) -> tuple[str | None, str | None]:
    """The pack's built environment's interpreter, or why there is none."""
    from comfy_airlock import env as airlock_env

    try:
        info = airlock_env.ensure_env(pack_dir, comfyui_dir=comfyui, home=home, build=False)
    except Exception as e:  # EnvMissing, ConfigError: reported as they are
        return None, f"{type(e).__name__}: {str(e)[:600]}"
    return info["python"], None


def _run_on(side: Side, prompt: dict[str, Any]) -> dict[str, Any]:
    """One node's run; a server that no longer runs prompts after it is started anew (and the
    run says so), so that one node never costs the rest of the pack its runs."""
    out = side.run_node(prompt)
    if out["status"] in ("timeout", "server died") and not _healthy(side):
        out["broke_server"] = True
        side.restart()
    return out


def _healthy(side: Side) -> bool:
    try:
        return side.healthy()
    except Exception:
        return False


def run_nodes(native: Side, isolated: Side, nodes: dict[str, Any], both: set[str]) -> dict:
    results = {}
    makers = producers(nodes)
    for name in sorted(nodes):
        try:
            prompt = node_prompt(name, nodes[name], makers)
        except NotRunnable as e:
            results[name] = {"verdict": "not runnable", "why": str(e)}
            continue
        n = _run_on(native, prompt)
        i = _run_on(isolated, prompt) if name in both else None
        verdict = compare.run_class(n, i, (str(native.ui.base_dir), str(isolated.ui.base_dir)))
        if verdict == "differs":
            # Rerun natively: a node that differs from itself is not comparable.
            native.forget()
            again = native.run_node(prompt)
            if compare.canonical(again) != compare.canonical(n):
                verdict = "nondeterministic natively"
        results[name] = {"verdict": verdict, "native": n, "isolated": i}
        print(f"    {name}: {verdict}", flush=True)
    return results


# ComfyUI's own websocket messages (server.py, execution.py, the progress hooks); every other
# type but ours (`comfy-airlock.*`, the panel's) is a pack's own `send_sync`.
_UPSTREAM_MESSAGES = frozenset(
    {
        "status",
        "progress",
        "progress_state",
        "progress_text",
        "executing",
        "executed",
        "execution_start",
        "execution_cached",
        "execution_success",
        "execution_error",
        "execution_interrupted",
        "binary",
        "feature_flags",
        "logs",
    }
)


def ui_messages(side: Side) -> dict[str, int]:
    """How many websocket messages of each pack-sent type the page got over the whole run (a
    monitor thread's, a node's feedback): a type sent natively and never isolated is a message
    lost on the way (ADR 0056)."""
    counts: dict[str, int] = {}
    for m in side.ui.messages():
        if m["type"] not in _UPSTREAM_MESSAGES and not m["type"].startswith("comfy-airlock."):
            counts[m["type"]] = counts.get(m["type"], 0) + 1
    return dict(sorted(counts.items()))


def _static_files(prefix: str, directory: str, limit: int = 3) -> list[str]:
    """Paths of up to ``limit`` files a static route serves (the first, by name), quoted as a
    browser sends them (efficiency-nodes' example workflows have spaces in their names)."""
    root = Path(directory)
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
    return [
        f"{prefix.rstrip('/')}/{urllib.parse.quote(p.relative_to(root).as_posix())}"
        for p in files[:limit]
    ]


def compare_routes(native: Side, isolated: Side, baselines: dict[str, set[str]]) -> dict:
    native_routes = native.routes()
    n = compare.pack_routes(native_routes, baselines["native"])
    i = compare.pack_routes(isolated.routes(), baselines["isolated"])
    asked = [r.split(" ", 1)[1] for r in n if compare.gettable(r) and r in i]
    for prefix, directory in compare.static_dirs(native_routes, n).items():
        if f"GET {prefix}" in i:
            asked.extend(_static_files(prefix, directory))
    answers = {}
    for path in asked:
        a, b = native.answer("GET", path), isolated.answer("GET", path)
        answers[f"GET {path}"] = {
            "native": a,
            "isolated": b,
            "differs": compare.answer_differs(a, b),
        }
    return {
        "native": n,
        "isolated": i,
        "only_native": sorted(set(n) - set(i)),
        "only_isolated": sorted(set(i) - set(n)),
        "answers": answers,
    }


def _import_failed(log: str, pack: str) -> str | None:
    lines = [ln for ln in log.splitlines() if "IMPORT FAILED" in ln and pack in ln]
    return lines[0].strip() if lines else None


def _log_errors(log: str, limit: int = 40) -> list[str]:
    keys = ("Error", "error", "Traceback", "Exception", "FAILED", "WARNING", "warning")
    return [ln[:300] for ln in log.splitlines() if any(k in ln for k in keys)][-limit:]


def _sides(work: Path, pack: Path, native_python: str | None, env: dict) -> tuple[Side, Side]:
    comfyui = Path(os.environ.get("COMFYUI_DIR") or DEFAULT_COMFYUI_DIR)
    native_base = make_base_dir(work, custom_nodes={PROBE_NAME: PROBE}, name="native")
    _copy(pack, native_base / "custom_nodes" / pack.name)
    native = Side("native", comfyui, native_base, native_python or HOST_PYTHON, env)
    isolated = Side("isolated", comfyui, work / "isolated", HOST_PYTHON, env)
    return native, isolated


def run_pack(
    pack: Path, work: Path, home: str, baselines: dict[str, set[str]], probe_size: int = 64
) -> dict[str, Any]:
    comfyui = Path(os.environ.get("COMFYUI_DIR") or DEFAULT_COMFYUI_DIR)
    env = {**COMMON_ENV, "AIRLOCK_HOME": home, "CORPUS_PROBE_SIZE": str(probe_size)}
    if work.exists():
        shutil.rmtree(work)
    iso_base = make_base_dir(
        work,
        custom_nodes={"comfy-airlock": REPO / "custom_node", PROBE_NAME: PROBE},
        name="isolated",
    )
    result: dict[str, Any] = {"pack": pack.name, "probe_size": probe_size}
    print(f"[{pack.name}] isolate", flush=True)
    result["isolate"] = isolate_as_user(pack, iso_base, comfyui, env)
    python, why = env_python(iso_base / "isolated_nodes" / pack.name, comfyui, home)
    result["env"] = {"python": python, "missing": why}
    native_python = None
    if python is not None:
        native_python = envs.native_python(
            UV, python, HOST_PYTHON, Path(home) / "native-venvs", work / "native-venv.log"
        )
    result["native_python"] = native_python
    native, isolated = _sides(work, pack, native_python, env)
    try:
        print(f"[{pack.name}] start native, isolated", flush=True)
        with ThreadPoolExecutor(2) as pool:
            ups = list(pool.map(Side.start, (native, isolated)))
        for side, up in zip((native, isolated), ups, strict=True):
            result[side.name] = {"started": up, "start_error": side.start_error}
        _observe(result, pack.name, native, isolated, baselines)
    except Exception as e:  # the pack restarted ComfyUI, say: what was seen so far is kept
        result["runner_error"] = f"{type(e).__name__}: {str(e)[:2000]}"
    finally:
        for side in (native, isolated):
            result.setdefault(side.name, {})["stop_seconds"] = side.stop()
            result[side.name]["restarts"] = side.restarts
            result[side.name]["log_errors"] = _log_errors(side.log_text())
    return result


def _observe(result: dict, pack: str, native: Side, isolated: Side, baselines: dict) -> None:
    for side in (native, isolated):
        r = result[side.name]
        r["startup_seconds"] = side.startup_seconds
        r["import_failed"] = _import_failed(side.log_text(), pack)
    if not (result["native"]["started"] and result["isolated"]["started"]):
        return
    n_nodes, i_nodes = native.nodes(pack), isolated.nodes(pack)
    bases = (str(native.ui.base_dir), str(isolated.ui.base_dir))
    from tests.comfyui.native_oracle import object_info_diff

    result["nodes"] = {
        "native": len(n_nodes),
        "isolated": len(i_nodes),
        "only_native": sorted(set(n_nodes) - set(i_nodes)),
        "only_isolated": sorted(set(i_nodes) - set(n_nodes)),
        "bases": list(bases),
        "object_info_diff": [
            d for d in object_info_diff(n_nodes, i_nodes) if not compare.same_but_base(d, bases)
        ][:200],
    }
    # What the pack's import did to ComfyUI's own nodes natively (RES4LYF's schedulers on
    # KSampler): isolated it cannot, so a difference here is one the start must name (ADR 0053).
    result["comfy_nodes_diff"] = [
        d
        for d in object_info_diff(native.comfy_nodes(), isolated.comfy_nodes())
        if not compare.same_but_base(d, bases)
    ][:50]
    result["routes"] = compare_routes(native, isolated, baselines)
    result["js"] = {"native": native.extensions(pack), "isolated": isolated.extensions(pack)}
    print(f"[{pack}] {len(n_nodes)} native / {len(i_nodes)} isolated nodes; running", flush=True)
    result["runs"] = run_nodes(native, isolated, n_nodes, set(i_nodes))
    result["ui_messages"] = {side.name: ui_messages(side) for side in (native, isolated)}
    try:  # outputs born in the worker's shared memory (ADR 0044) against large ones digested
        result["born"] = isolated.ui.get("/corpus-probe/born")
    except Exception as e:
        result["born"] = {"error": f"{type(e).__name__}: {e}"}


def baselines(work: Path, home: str) -> dict[str, set[str]]:
    """The routes of ComfyUI with only the probe (native) and with the probe and comfy-airlock
    but no isolated pack (isolated)."""
    cached = work / "routes.json"
    if cached.is_file():
        return {k: set(v) for k, v in json.loads(cached.read_text()).items()}
    comfyui = Path(os.environ.get("COMFYUI_DIR") or DEFAULT_COMFYUI_DIR)
    env = {**COMMON_ENV, "AIRLOCK_HOME": home}
    out = {}
    for name, nodes in (
        ("native", {PROBE_NAME: PROBE}),
        ("isolated", {PROBE_NAME: PROBE, "comfy-airlock": REPO / "custom_node"}),
    ):
        base = make_base_dir(work, custom_nodes=nodes, name=f"baseline-{name}")
        side = Side(name, comfyui, base, HOST_PYTHON, env)
        if not side.start():
            raise SystemExit(f"baseline {name} did not start: {side.start_error}")
        try:
            out[name] = {compare.route_key(r) for r in side.routes()}
        finally:
            side.stop()
    cached.write_text(json.dumps({k: sorted(v) for k, v in out.items()}))
    return out


def _head() -> str:
    """The comfy-airlock commit the pack ran against (a dirty tree is marked)."""
    git = ["git", "-C", str(REPO)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--", "python", "crates"], capture_output=True, text=True
    ).stdout
    return head.strip()[:12] + ("+dirty" if dirty.strip() else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packs", type=Path, help="folder of pack folders (never written to)")
    parser.add_argument("--only", nargs="*", help="these packs only")
    parser.add_argument("--skip", nargs="*", default=[], help="not these packs")
    parser.add_argument("--work", type=Path, default=Path("/work/corpus/runs"))
    parser.add_argument("--home", default="/work/corpus/airlock-home", help="AIRLOCK_HOME")
    parser.add_argument("--commits", type=Path, help="JSON: pack -> {repo, commit, date}")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument(
        "--probe-size", type=int, default=64, help="side of the probe's IMAGE and MASK"
    )
    parser.add_argument(
        "--host-has",
        nargs="*",
        default=[],
        help="packages ComfyUI's environment also has (as other packs install them): the "
        "isolated side's ComfyUI and `airlock isolate` run in a copy of the host venv with them",
    )
    args = parser.parse_args(argv)
    global HOST_PYTHON
    if args.host_has:
        HOST_PYTHON = envs.host_with(
            UV,
            HOST_PYTHON,
            args.host_has,
            Path(args.home) / "native-venvs",
            args.work / "host-venv.log",
        )
        print(f"[corpus] ComfyUI's environment: {HOST_PYTHON} (also {args.host_has})")
    packs = sorted(p for p in args.packs.iterdir() if p.is_dir() and not p.name.startswith("."))
    if args.only:  # in the order given
        by_name = {p.name: p for p in packs}
        packs = [by_name[n] for n in args.only if n in by_name]
    packs = [p for p in packs if p.name not in args.skip]
    commits = json.loads(args.commits.read_text()) if args.commits else {}
    args.results.mkdir(parents=True, exist_ok=True)
    base_lines = baselines(args.work / "_baselines", args.home)
    for pack in packs:
        t0 = time.monotonic()
        try:
            result = run_pack(pack, args.work / pack.name, args.home, base_lines, args.probe_size)
        except (
            Exception
        ) as e:  # one pack's mishap (a route that restarts ComfyUI) never ends the run
            result = {"pack": pack.name, "runner_error": f"{type(e).__name__}: {str(e)[:2000]}"}
        result["source"] = commits.get(pack.name)
        result["host_has"] = args.host_has
        result["seconds"] = round(time.monotonic() - t0, 1)
        result["date"] = time.strftime("%Y-%m-%d")
        result["airlock_commit"] = _head()
        path = args.results / f"{pack.name}.json"
        path.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        print(f"[{pack.name}] done in {result['seconds']} s -> {path}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

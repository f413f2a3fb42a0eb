"""The corpus summary: ``bench/corpus/results/*.json`` (from ``run.py``) into
``corpus.json`` (one row per pack) and ``corpus.md`` (the table, and per pack what differs).

    .venv/bin/python -m bench.corpus.report [--results bench/corpus/results]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from bench.corpus.compare import same_but_base
from bench.corpus.compare import verdict as run_verdict

RESULTS = Path(__file__).resolve().parent / "results"
# Rows from before results recorded their comfy-airlock commit (before main's pack-JS work).
STALE = "4feef20 or earlier"


def verdict(r: dict[str, Any]) -> str:
    """The pack's line: does it load natively; if so, is the isolated pack the native one."""
    native, isolated = r.get("native") or {}, r.get("isolated") or {}
    if r.get("runner_error") and not r.get("runs"):
        return "runner error"
    if not native.get("started"):
        return "native ComfyUI did not start"
    nodes = r.get("nodes") or {}
    if not nodes.get("native"):
        return "loads no node natively"
    if not isolated.get("started"):
        return "isolated ComfyUI did not start"
    if nodes.get("only_native") or nodes.get("only_isolated"):
        return "nodes differ"
    if nodes.get("object_info_diff"):
        return "object_info differs"
    bases = tuple(nodes.get("bases") or ())
    runs = Counter(run_verdict(v, bases) for v in (r.get("runs") or {}).values())
    if runs.get("differs") or runs.get("isolated failed"):
        return "outputs differ"
    routes = r.get("routes") or {}
    if routes.get("only_native") or any(a["differs"] for a in routes.get("answers", {}).values()):
        return "routes differ"
    js = r.get("js") or {}
    if sorted(js.get("native") or []) != sorted(js.get("isolated") or []):
        return "JS differs"
    if ui_lost(r):
        return "UI messages lost"
    return "identical"


def _base_diffs_dropped(r: dict[str, Any]) -> None:
    """Results from before ``run.py`` dropped base-directory-only differences: the same rule
    (``compare.same_but_base``), with the runner's default layout (``<work>/<pack>/native``,
    ``.../isolated``) where the result does not record its two base directories."""
    nodes = r.get("nodes") or {}
    pack = r["pack"]
    bases = nodes.get("bases") or (f"/{pack}/native", f"/{pack}/isolated")
    diffs = nodes.get("object_info_diff") or []
    nodes["object_info_diff"] = [d for d in diffs if not same_but_base(d, tuple(bases))]


def row(r: dict[str, Any]) -> dict[str, Any]:
    nodes = r.get("nodes") or {}
    bases = tuple(nodes.get("bases") or ())
    runs = Counter(run_verdict(v, bases) for v in (r.get("runs") or {}).values())
    routes = r.get("routes") or {}
    answers = routes.get("answers") or {}
    js = r.get("js") or {}
    return {
        "pack": r["pack"],
        "commit": ((r.get("source") or {}).get("commit") or "")[:10],
        "airlock_commit": r.get("airlock_commit") or STALE,
        "isolate_rc": (r.get("isolate") or {}).get("rc"),
        "verdict": verdict(r),
        "nodes_native": nodes.get("native", 0),
        "nodes_isolated": nodes.get("isolated", 0),
        "object_info_diffs": len(nodes.get("object_info_diff") or []),
        "ran_identical": runs.get("identical", 0),
        "ran_identical_objects": runs.get("identical by class and repr", 0),
        "ran_differs": runs.get("differs", 0),
        "isolated_failed": runs.get("isolated failed", 0),
        "same_error": runs.get("same error", 0),
        "not_run_natively": runs.get("not run natively", 0),
        "not_runnable": runs.get("not runnable", 0),
        "nondeterministic": runs.get("nondeterministic natively", 0),
        "routes_native": len(routes.get("native") or []),
        "routes_isolated": len(routes.get("isolated") or []),
        "routes_asked": len(answers),
        "routes_same": sum(1 for a in answers.values() if not a["differs"]),
        "js_native": len(js.get("native") or []),
        "js_isolated": len(js.get("isolated") or []),
        "routes_only_native": len(routes.get("only_native") or []),
        "js_same": sorted(js.get("native") or []) == sorted(js.get("isolated") or []),
        "ui_native": len((r.get("ui_messages") or {}).get("native") or {}),
        "ui_lost": len(ui_lost(r)),
        # None: run before the comparison was recorded.
        "comfy_nodes_diffs": (
            None if "comfy_nodes_diff" not in r else len(r.get("comfy_nodes_diff") or [])
        ),
    }


def totals(rows: list[dict[str, Any]]) -> str:
    """The corpus against issue 14's target, counted from the rows."""
    loads = [r for r in rows if r["nodes_native"]]
    all_nodes = [r for r in loads if r["nodes_isolated"] == r["nodes_native"]]
    same_info = [r for r in all_nodes if not r["object_info_diffs"]]
    ran = sum(
        r["ran_identical"] + r["ran_identical_objects"] + r["ran_differs"] + r["isolated_failed"]
        for r in loads
    )
    same = sum(r["ran_identical"] + r["ran_identical_objects"] for r in loads)
    objects = sum(r["ran_identical_objects"] for r in loads)
    routed = [r for r in loads if r["routes_native"]]
    routes_ok = [
        r for r in routed if not r["routes_only_native"] and r["routes_same"] == r["routes_asked"]
    ]
    with_js = [r for r in loads if r["js_native"]]
    js_ok = [r for r in with_js if r["js_same"]]
    messaging = [r for r in loads if r["ui_native"]]
    ui_ok = [r for r in messaging if not r["ui_lost"]]
    compared = [r for r in loads if r["comfy_nodes_diffs"] is not None]
    changing = [r["pack"] for r in compared if r["comfy_nodes_diffs"]]
    lines = [
        f"- packs: {len(rows)}; load natively (at least one node): {len(loads)}",
        f"- load isolated with all their nodes: {len(all_nodes)} of {len(loads)}",
        f"- the same `/object_info` for all their nodes: {len(same_info)} of {len(loads)}",
        f"- nodes that ran natively, same outputs isolated: {same} of {ran} "
        f"({objects} of them compared by class and repr)",
        f"- packs with routes whose routes all exist and answer as native: "
        f"{len(routes_ok)} of {len(routed)}",
        f"- packs with JS whose JS files are all listed for the frontend isolated: "
        f"{len(js_ok)} of {len(with_js)}",
        f"- packs whose own UI messages (`send_sync` types, recorded since 2026-12-06) all "
        f"reached the page isolated: {len(ui_ok)} of {len(messaging)}",
        f"- packs whose import changes ComfyUI's own nodes natively, which isolated it cannot "
        f"(recorded since 2026-12-07): {len(changing)} of {len(compared)}"
        + (f" ({', '.join(changing)})" if changing else ""),
    ]
    return "\n".join(lines) + "\n"


COLUMNS = (
    ("pack", "pack"),
    ("verdict", "verdict"),
    ("nodes_native", "nodes native"),
    ("nodes_isolated", "isolated"),
    ("object_info_diffs", "object_info diffs"),
    ("ran_identical", "ran: identical"),
    ("ran_identical_objects", "identical by class+repr"),
    ("ran_differs", "differ"),
    ("isolated_failed", "isolated failed"),
    ("same_error", "same error"),
    ("not_run_natively", "failed natively only"),
    ("not_runnable", "inputs not made"),
    ("routes_native", "routes native"),
    ("routes_isolated", "isolated"),
    ("routes_same", "GET same"),
    ("routes_asked", "GET asked"),
    ("js_native", "JS native"),
    ("js_isolated", "JS isolated"),
    ("airlock_commit", "airlock commit"),
)


def table(rows: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(title for _, title in COLUMNS) + " |\n"
    head += "|" + "---|" * len(COLUMNS) + "\n"
    body = "".join("| " + " | ".join(str(r[k]) for k, _ in COLUMNS) + " |\n" for r in rows)
    return head + body


def ui_lost(r: dict[str, Any]) -> list[str]:
    """The websocket message types of the pack's own that reached the page natively and never
    isolated (recorded since 2026-12-06; none for older results)."""
    ui = r.get("ui_messages") or {}
    return sorted(set(ui.get("native") or {}) - set(ui.get("isolated") or {}))


def details(r: dict[str, Any]) -> str:
    lines = []
    nodes = r.get("nodes") or {}
    for key in ("only_native", "only_isolated"):
        if nodes.get(key):
            lines.append(f"- nodes {key.replace('_', ' ')}: {', '.join(nodes[key][:20])}")
    lines += [f"- object_info: {d[:200]}" for d in (nodes.get("object_info_diff") or [])[:5]]
    for name, v in sorted((r.get("runs") or {}).items()):
        if run_verdict(v) in ("differs", "isolated failed"):
            iso = v.get("isolated") or {}
            lines.append(f"- run {name}: {run_verdict(v)}: {str(iso.get('error', ''))[:200]}")
    routes = r.get("routes") or {}
    if routes.get("only_native"):
        lines.append(f"- routes only native: {', '.join(routes['only_native'][:10])}")
    for route, a in sorted((routes.get("answers") or {}).items()):
        if a["differs"]:
            lines.append(f"- route {route}: {a['differs'][:200]}")
    lines += [
        f"- ComfyUI's own node, natively changed: {d[:200]}"
        for d in (r.get("comfy_nodes_diff") or [])[:5]
    ]
    lost = ui_lost(r)
    if lost:
        lines.append(f"- UI messages sent natively, never isolated: {', '.join(lost[:10])}")
    for side in ("native", "isolated"):
        s = r.get(side) or {}
        if s.get("start_error"):
            lines.append(f"- {side} start: {s['start_error'][-300:]}")
        if s.get("import_failed"):
            lines.append(f"- {side}: {s['import_failed']}")
    if r.get("runner_error"):
        lines.append(f"- runner: {r['runner_error'][:300]}")
    if not lines:
        return ""
    return f"### {r['pack']}\n\n" + "\n".join(lines) + "\n\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    raw = [json.loads(p.read_text()) for p in sorted(args.results.glob("*.json"))]
    raw = [r for r in raw if "pack" in r]
    for r in raw:
        _base_diffs_dropped(r)
    rows = [row(r) for r in raw]
    (args.results / "corpus.json").write_text(json.dumps(rows, indent=1) + "\n")
    counts = Counter(r["verdict"] for r in rows)
    summary = ", ".join(f"{n} {v}" for v, n in counts.most_common())
    fresh = [r for r in rows if r["airlock_commit"] != STALE]
    text = f"# Corpus: {len(rows)} packs\n\n{summary}\n\nAll rows:\n\n{totals(rows)}\n"
    text += f"Rows run on the merged branch only:\n\n{totals(fresh)}\n" + table(rows) + "\n"
    text += "## What differs\n\n" + "".join(details(r) for r in raw)
    (args.results / "corpus.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

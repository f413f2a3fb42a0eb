"""Statistics, targets, the markdown table and the chart of bench/compare.py.

A row's figure is the median of its per-round medians (for latency rows: of its per-round
p50, p90 and p99 each), its spread the lowest and highest of those per-round values. Ratios
are of figures: to the row's floor, to the best peer (the lower of comfy-env's and
pyisolate's figures: "x faster than the best peer" is best peer / comfy-airlock), and to the
plain pickle worker (a baseline, not a peer). Each row carries the 1-minute load average read
after each of its batches.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

MiB = 1 << 20
PEERS = ("comfy_env", "pyisolate")
LABELS = {
    "floor": "floor",
    "airlock": "comfy-airlock",
    "comfy_env": "comfy-env 0.4.46",
    "pyisolate": "pyisolate 0.10.2",
    "pickle": "pickle worker",
}


def pct(sorted_ns: list[int], q: float) -> float:
    """Nearest-rank percentile of sorted samples."""
    return float(sorted_ns[max(0, min(len(sorted_ns) - 1, math.ceil(q * len(sorted_ns)) - 1))])


def stat(rounds: list[list[int]], latency: bool) -> dict:
    rounds = [r for r in rounds if r]
    if not rounds:
        return {}
    flat = sorted(ns for r in rounds for ns in r)
    out = {"n": len(flat), "rounds": len(rounds)}
    qs = {"p50": 0.5, "p90": 0.9, "p99": 0.99} if latency else {"p50": 0.5}
    for name, q in qs.items():
        per = [statistics.median(r) if q == 0.5 else pct(sorted(r), q) for r in rounds]
        out[name] = statistics.median(per)
        out[f"{name}_spread"] = [min(per), max(per)]
        out[f"{name}_rounds"] = per
        if latency:
            out[f"{name}_pooled"] = statistics.median(flat) if q == 0.5 else pct(flat, q)
    out["min"], out["max"] = flat[0], flat[-1]
    return out


def summarize(cases, keys, **extra) -> dict:
    rows = []
    for c in cases:
        lat = c.kind == "latency"
        s = {who: stat(r, lat) for who, r in c.samples.items()}
        row = {
            "key": c.key,
            "label": c.label,
            "kind": c.kind,
            "nbytes": c.nbytes,
            "floor_label": c.floor_label,
            "skip": c.skip,
            "stats": s,
            "samples_ns": {} if lat else c.samples,
            "loads": c.loads,
        }
        peers = [s[p]["p50"] for p in PEERS if s.get(p)]
        best = min(peers) if peers else None
        floor = s.get("floor", {}).get("p50")
        row["best_peer_p50"] = best
        pickle = s.get("pickle", {}).get("p50")
        row["ratios"] = {
            who: {
                "to_floor": st["p50"] / floor if floor else None,
                "best_peer_over_this": best / st["p50"] if best else None,
                "pickle_over_this": pickle / st["p50"] if pickle else None,
            }
            for who, st in s.items()
            if st and who != "floor"
        }
        rows.append(row)
    res = {"rows": rows, "systems": keys, **extra}
    res["targets"] = targets(res)
    return res


def _row(res, key):
    return next((r for r in res["rows"] if r["key"] == key), None)


def targets(res) -> list[dict]:
    out = []

    def add(name, value, limit, ok, unit="x", note=""):
        out.append(
            {
                "target": name,
                "value": value,
                "limit": limit,
                "unit": unit,
                "pass": None if ok is None else bool(ok),
                "note": note,
            }
        )

    def ratio(key, which):
        r = _row(res, key)
        return r["ratios"].get("airlock", {}).get(which) if r else None

    for key, what in (("noop_same", "[1 CPU]"), ("noop_sched", "[scheduler]")):
        v = ratio(key, "to_floor")
        if v is not None:
            add(f"no-op p50 <= 1.5x socketpair floor {what}", v, 1.5, v <= 1.5)
        v = ratio(key, "pickle_over_this")
        if v is not None:
            add(f"no-op p50 never slower than the pickle worker {what}", v, 1.0, v >= 1.0)
        v = ratio(key, "best_peer_over_this")
        if v is not None:
            add(f"no-op p50 >= 3x faster than best peer {what}", v, 3.0, v >= 3.0)
    for n in (MiB, 64 * MiB, 512 * MiB):
        name = f"{n // MiB} MiB"
        v = ratio(f"fresh_{n}", "to_floor")
        if v is not None:
            add(f"fresh output {name} <= 1.5x (x * 1 + one copy)", v, 1.5, v <= 1.5)
        v = ratio(f"fresh_{n}", "best_peer_over_this")
        if v is not None:
            add(f"fresh output {name} >= 3x faster than best peer", v, 3.0, v >= 3.0)
    for n in (64 * MiB, 512 * MiB):
        name = f"{n // MiB} MiB"
        v = ratio(f"echo_{n}", "to_floor")
        if v is not None:
            add(f"echo {name} <= 3x two memcpys", v, 3.0, v <= 3.0)
        v = ratio(f"echo_{n}", "best_peer_over_this")
        if v is not None:
            add(f"echo {name} >= 3x faster than best peer", v, 3.0, v >= 3.0)
    for key, name in (("resend_64", "same tensor re-sent"), ("passon_64", "output passed on")):
        r = _row(res, key)
        if r and r["stats"].get("airlock"):
            v = r["stats"]["airlock"]["p50"] / 1e6
            add(f"{name}, 64 MiB, <= 1 ms", v, 1.0, v <= 1.0, "ms")
    v = ratio("node_image", "best_peer_over_this")
    if v is not None:
        add("IMAGE 1024^2 node call >= 3x faster than best peer", v, 3.0, v >= 3.0)
    v = ratio("cold", "to_floor")
    if v is not None:
        add("cold start <= 1.05x bare import (torch + ComfyUI core)", v, 1.05, v <= 1.05)
    mem = res.get("memory", {})
    bare = [m["rss_mib"] for m in mem.get("cold", {}).get("bare", [])]
    idle = mem.get("warm_idle", {}).get("airlock")
    if idle and bare:
        d = idle["rss_mib"] - statistics.median(bare)
        add(
            "idle worker RSS 10 s after its last call <= bare import + 64 MiB",
            d,
            64.0,
            d <= 64.0,
            "MiB",
        )
    lo = res.get("leftovers", {}).get("airlock")
    if lo:
        for k, name in (
            ("shm_bytes", "/dev/shm bytes"),
            ("processes", "stray processes"),
            ("tmpdir_count", "TMPDIR files"),
        ):
            v = len(lo[k]) if isinstance(lo[k], list) else lo[k]
            add(f"nothing left behind: {name} = 0", v, 0, v == 0, "")
    return out


# --- markdown -------------------------------------------------------------------------------


def _fmt(ns: float | None, kind: str) -> str:
    if ns is None:
        return ""
    if kind == "latency":
        return f"{ns / 1e3:.1f} µs"
    ms = ns / 1e6
    return f"{ms:.3g} ms" if ms < 100 else f"{ms:.0f} ms"


def _cell(st: dict, kind: str, q: str = "p50") -> str:
    if not st:
        return "-"
    lo, hi = st[f"{q}_spread"]
    return f"{_fmt(st[q], kind)} ({_fmt(lo, kind)}-{_fmt(hi, kind)})"


def markdown(res) -> str:
    keys = res["systems"]
    meta = res["meta"]
    lines = [
        f"Run of {meta['date_utc']}, {res['plan']['rounds']} rounds"
        f"{' (--quick)' if res['quick'] else ''}, {res['elapsed']:.0f} s; "
        f"{meta['cpu']}, {meta['nproc']} CPUs; 1-min load {' '.join(f'{x:.2f}' for x in meta['loadavg_1min'])}.",
        "",
        "Figure: median of per-round medians (lowest-highest per-round median); load: the "
        "1-minute load average after the row's batches (median, lowest-highest).",
        "",
        "| Row | floor | "
        + " | ".join(LABELS[k] for k in keys)
        + " | airlock ÷ floor | best peer ÷ airlock | pickle ÷ airlock | load |",
        "|---|---|" + "---|" * len(keys) + "---:|---:|---:|---|",
    ]
    for r in res["rows"]:
        st, kind = r["stats"], r["kind"]
        qs = ("p50", "p90", "p99") if kind == "latency" else ("p50",)
        for q in qs:
            label = r["label"] + (f" {q}" if kind == "latency" else "")
            cells = []
            for k in keys:
                if k in r["skip"]:
                    cells.append(f"not measured: {r['skip'][k]}")
                else:
                    cells.append(_cell(st.get(k, {}), kind, q))
            ratio_f = ratio_p = ratio_k = ""
            a, f = st.get("airlock", {}).get(q), st.get("floor", {}).get(q)
            if a and f:
                ratio_f = f"{a / f:.2f}x"
            peers = [st[p][q] for p in PEERS if st.get(p)]
            if a and peers:
                ratio_p = f"{min(peers) / a:.1f}x"
            k = st.get("pickle", {}).get(q)
            if a and k:
                ratio_k = f"{k / a:.2f}x"
            floor = _cell(st.get("floor", {}), kind, q) if st.get("floor") else "-"
            if r["floor_label"] and q == "p50":
                floor += f" <br>*{r['floor_label']}*"
            loads = r.get("loads") or []
            load = (
                f"{statistics.median(loads):.1f} ({min(loads):.1f}-{max(loads):.1f})"
                if loads
                else ""
            )
            lines.append(
                f"| {label} | {floor} | "
                + " | ".join(cells)
                + f" | {ratio_f} | {ratio_p} | {ratio_k} | {load} |"
            )
    mem = res["memory"]
    bare = [m["rss_mib"] for m in mem["cold"].get("bare", [])]
    b = statistics.median(bare) if bare else None

    def mem_row(label: str, by_key: dict) -> None:
        cells = [
            f"{by_key[k]['rss_mib']:.0f} MiB (PSS {by_key[k]['pss_mib']:.0f})"
            if k in by_key
            else "-"
            for k in keys
        ]
        a = by_key.get("airlock")
        d = f"+{a['rss_mib'] - b:.0f} MiB" if a and b is not None else ""
        floor = f"{b:.0f} MiB <br>*bare import*" if b is not None else "-"
        lines.append(f"| {label} | {floor} | " + " | ".join(cells) + f" | {d} | | | |")

    cold = {
        k: {
            "rss_mib": statistics.median(m["rss_mib"] for m in v),
            "pss_mib": statistics.median(m["pss_mib"] for m in v),
        }
        for k, v in mem["cold"].items()
        if v and k != "bare"
    }
    mem_row("RSS of a worker 0.5 s after its first call (cold start)", cold)
    mem_row("RSS of each warm worker after the rounds", mem["warm_after_rounds"])
    mem_row("RSS of each warm worker 10 s after its last call", mem["warm_idle"])
    lo = res["leftovers"]
    for field_, name, fmt in (
        ("shm_bytes", "left in /dev/shm after stop", lambda v: f"{v / MiB:.1f} MiB"),
        ("processes", "processes left after stop", lambda v: str(len(v))),
        ("tmpdir_count", "files and dirs left in TMPDIR after stop", str),
    ):
        cells = [fmt(lo[k][field_]) if k in lo else "-" for k in keys]
        lines.append(f"| {name} | 0 | " + " | ".join(cells) + " | | | | |")
    lines += ["", "Targets (comfy-airlock):", ""]
    for t in res["targets"]:
        if t["pass"] is None and t["value"] is not None:
            lines.append(f"- BOUND {t['target']}: {t['value']:.3g}{t['unit']} ({t['note']})")
        elif t["pass"] is None:
            lines.append(f"- ELSEWHERE {t['target']}: {t['note']}")
        else:
            v = t["value"]
            lines.append(
                f"- {'PASS' if t['pass'] else 'MISS'} {t['target']}: {v:.3g}{t['unit']} "
                f"(limit {t['limit']}{t['unit']})"
            )
    bad = {k: v for k, v in res["correct"].items() if v is not True}
    lines += [
        "",
        "Checks (one call per case per system): " + ("all equal" if not bad else str(bad)),
    ]
    return "\n".join(lines) + "\n"


# --- chart ----------------------------------------------------------------------------------


def chart(res, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ["floor", *res["systems"]]
    colors = {
        "floor": "#999999",
        "airlock": "#1f77b4",
        "comfy_env": "#ff7f0e",
        "pyisolate": "#2ca02c",
        "pickle": "#9467bd",
    }
    rows = [
        r for r in res["rows"] if r["kind"] != "latency" or r["key"] in ("noop_sched", "small_in")
    ]
    rows += [r for r in res["rows"] if r["key"] == "noop_same"]
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(rows) * len(keys) / 2 + 1.5))
    h = 0.8 / len(keys)
    for i, r in enumerate(rows):
        for j, k in enumerate(keys):
            st = r["stats"].get(k)
            if not st:
                continue
            ms = st["p50"] / 1e6
            lo, hi = (v / 1e6 for v in st["p50_spread"])
            y = i + j * h
            ax.barh(y, ms, height=h, color=colors[k], label=LABELS[k] if i == 0 else None)
            ax.errorbar(ms, y, xerr=[[ms - lo], [hi - ms]], fmt="none", ecolor="black", lw=0.7)
    ax.set_yticks([i + 0.4 - h / 2 for i in range(len(rows))])
    ax.set_yticklabels([r["label"].split(" (")[0] for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("ms per call (median of per-round medians; bars: per-round spread), log scale")
    ax.set_title(
        "comfy-airlock vs comfy-env vs pyisolate vs a pickle worker, one run"
        + (" (quick)" if res["quick"] else "")
    )
    handles, labels = ax.get_legend_handles_labels()
    # The legend takes its labels from the first row, which may lack a system.
    seen = dict(zip(labels, handles, strict=True))
    ax.legend(seen.values(), seen.keys(), fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

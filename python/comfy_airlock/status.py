"""``airlock status``: what a running ComfyUI's isolated packs hold, from its
``GET /airlock/status`` route (workers, their models, and the stand-ins in ComfyUI's ledger)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any


def fetch(url: str, timeout: float = 10.0) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url.rstrip('/')}/airlock/status", timeout=timeout) as r:
        return json.load(r)


def _size(n: Any) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def render(status: dict[str, Any]) -> str:
    lines = []
    cols = (
        "pack",
        "state",
        "pid",
        "gen",
        "python",
        "held MiB",
        "reserved MiB",
        "floor MiB",
        "calls",
    )
    rows = [
        (
            w["pack"],
            w["state"],
            str(w.get("pid") or "-"),
            str(w.get("generation") or "-"),
            w.get("python") or "-",
            _size(w.get("held")),
            _size(w.get("reserved")),
            _size(w.get("floor")),
            str(w.get("calls", "-")),
        )
        for w in status["workers"]
    ]
    lines += _table(cols, rows)
    models = [m for w in status["workers"] for m in w.get("models") or ()]
    if models:
        lines.append("")
        cols = ("pack", "gen", "model", "device", "size", "resident", "in ledger", "in use")
        rows = [
            (
                m["pack"],
                str(m["generation"]),
                f"{m['name']} #{m['model']}",
                m["device"],
                _size(m["size"]),
                _size(m["resident"]),
                "yes" if m["in_ledger"] else "no",
                "yes" if m["in_use"] else "no",
            )
            for m in models
        ]
        lines += _table(cols, rows)
    ledger = status.get("ledger") or []
    lines.append("")
    lines.append(f"ComfyUI's loaded models ({len(ledger)}):")
    lines += [
        f"  {e['index']:>2} {e['kind']:<8} {e['name']:<32} {e['device']:<8} "
        f"{_size(e['loaded'])} of {_size(e['size'])} loaded"
        for e in ledger
    ]
    lines += _ram(status)
    return "\n".join(lines)


def _ram(status: dict[str, Any]) -> list[str]:
    """The pin budget (host/memory/ram.py): its total and split, and each worker's share."""
    ram = status.get("ram") or {}
    if not ram:
        return []
    lines = [
        "",
        f"Pinned RAM: budget {_size(ram['budget'])} of {_size(ram['total'])} ({ram['source']}), "
        f"{_size(ram['available'])} available; ComfyUI {_size(ram['host_pinned'])}, "
        f"workers {_size(ram['workers_pinned'])} of {_size(ram['ceilings'])}; "
        f"cache headroom {_size(ram['headroom'])}",
    ]
    lines += [
        f"  {w['pack']}: {_size(w.get('pinned'))} pinned of {_size(w.get('pin_ceiling'))}, "
        f"resident {_size(w.get('rss'))}"
        for w in status["workers"]
        if w.get("pin_ceiling") is not None
    ]
    return lines


def _table(cols: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [
        max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)
    ]
    out = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="airlock status", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--url",
        default=os.environ.get("COMFYUI_URL", "http://127.0.0.1:8188"),
        help="the running ComfyUI (default: $COMFYUI_URL or http://127.0.0.1:8188)",
    )
    ap.add_argument("--json", action="store_true", help="print the raw JSON")
    opts = ap.parse_args(argv)
    try:
        status = fetch(opts.url)
    except (urllib.error.URLError, OSError, ValueError) as e:
        print(f"airlock status: cannot read {opts.url}/airlock/status: {e}", file=sys.stderr)
        return 2
    print(json.dumps(status, indent=2) if opts.json else render(status))
    return 0

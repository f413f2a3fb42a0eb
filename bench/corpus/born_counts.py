"""Per pack of a corpus run made with ``--probe-size 256``: the tensors of at least 256 KiB
that the probe's ``CorpusDigest`` was given (``large``) and the outputs the pack's worker sent
born in shared memory, without a copy (``sent``, ADR 0044), read from each result's ``born``.

    .venv/bin/python -m bench.corpus.born_counts bench/results/issue20-born/corpus256
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    rows, large, sent = [], 0, 0
    for path in sorted(Path(argv[0]).glob("*.json")):
        r = json.loads(path.read_text())
        born = r.get("born") or {}
        stats = (born.get("workers") or {}).get(r["pack"]) or {}
        if "sent" not in stats:
            rows.append(f"| {r['pack']} | - | - | {stats.get('error') or born.get('error')} |")
            continue
        large += born["large"]
        sent += stats["sent"]
        rows.append(f"| {r['pack']} | {born['large']} | {stats['sent']} | {stats} |")
    print("| pack | large tensors digested | sent born | the worker's counters |")
    print("|---|---:|---:|---|")
    print("\n".join(rows))
    print(f"| all | {large} | {sent} | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

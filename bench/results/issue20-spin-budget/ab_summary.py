"""The airlock / floor / pickle p50 of each row of the spin-budget runs, side by side (µs):

python ab_summary.py > ab-summary.txt
"""

import collections
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def order(tag: str) -> tuple[str, int]:
    budget, run = tag.split("-")
    return run, int(budget[len("spin") :])


def main() -> None:
    rows: dict[str, dict[str, tuple[float, float, float]]] = collections.defaultdict(dict)
    for f in sorted(HERE.glob("spin*-r*.json")):
        for r in json.loads(f.read_text())["rows"]:
            st = r.get("stats") or {}
            if "airlock" in st:
                p50 = [st.get(k, {}).get("p50", 0) / 1000 for k in ("airlock", "floor", "pickle")]
                rows[r["key"]][f.stem] = tuple(p50)
    tags = sorted({t for v in rows.values() for t in v}, key=order)
    print("row".ljust(16), "  ".join(t.ljust(20) for t in tags))
    for key, v in rows.items():
        cells = ["/".join(f"{x:.1f}" for x in v[t]) if t in v else "-" for t in tags]
        print(key.ljust(16), "  ".join(c.ljust(20) for c in cells))
    print("(airlock / floor / pickle p50, us)")


if __name__ == "__main__":
    main()

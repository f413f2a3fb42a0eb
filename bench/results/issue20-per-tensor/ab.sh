#!/usr/bin/env bash
# The per-tensor codec trims (values.py), before and after, alternating in the same run:
# "before" is values.py of dffe03e beside the same package ($BEFORE, made by the caller:
# a copy of python/comfy_airlock with that file), on PYTHONPATH; the native module is the same.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
OUT="$ROOT/bench/results/issue20-per-tensor"
PY="$ROOT/.envs/bench/bin/python"
CASES="noop_sched,small_in,fresh_1048576,small_dict"
for i in 1 2; do
    for which in before after; do
        uptime | tee "$OUT/load-$which-$i.txt"
        pp=""; [[ $which == before ]] && pp="$BEFORE"
        PYTHONPATH="$pp" "$PY" "$ROOT/bench/fresh_parts.py" --rounds 1 --calls 2000 \
            >"$OUT/fresh_parts-$which-$i.json"
        PYTHONPATH="$pp" "$PY" "$ROOT/bench/compare.py" --systems airlock --cases "$CASES" \
            --rounds 3 --out "$OUT/compare-$which-$i.json" >"$OUT/compare-$which-$i.log" 2>&1
    done
done

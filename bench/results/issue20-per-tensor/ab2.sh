#!/usr/bin/env bash
# Step 2 of the per-tensor trims (8b8e6d5's values.py and mappings.py against 2581cec's),
# alternating in the same run: "before" ($BEFORE, made by the caller) is a copy of
# python/comfy_airlock with 2581cec's two files, on PYTHONPATH; the native module is the same.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
OUT="$ROOT/bench/results/issue20-per-tensor"
PY="$ROOT/.envs/bench/bin/python"
for i in 1 2; do
    for which in before after; do
        uptime | tee "$OUT/step2-load-$which-$i.txt"
        pp=""; [[ $which == before ]] && pp="$BEFORE"
        PYTHONPATH="$pp" "$PY" "$ROOT/bench/fresh_parts.py" --rounds 1 --calls 2000 \
            >"$OUT/step2-fresh_parts-$which-$i.json"
        PYTHONPATH="$pp" "$PY" "$ROOT/bench/compare.py" --systems airlock \
            --cases noop_sched,small_in,fresh_1048576,small_dict --rounds 3 \
            --out "$OUT/step2-compare-$which-$i.json" >"$OUT/step2-compare-$which-$i.log" 2>&1
    done
done

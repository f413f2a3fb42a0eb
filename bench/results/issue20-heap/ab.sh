#!/usr/bin/env bash
# The prompt (bench/prompt.py, 4 rounds x 5 prompts per server) and its per-process faults
# (prompt_faults.py, 20 prompts, twice) with the worker's heap knobs ("new", 34194bf) and
# without them ("old": its parent's supervisor.py, which does not apply heap_policy),
# alternating three times. Run from the repository root on a clean tree; output: ab.txt.
set -euo pipefail
D=bench/results/issue20-heap
NEW=34194bf
for i in 1 2 3; do
    for which in new old; do
        [[ $which == old ]] && git checkout -q "$NEW~1" -- python/comfy_airlock/supervisor.py
        echo "== $which $i $(date -u +%H:%M:%SZ)"
        .venv/bin/python bench/prompt.py --rounds 4 --prompts 5 --out "$D/prompt-$which-$i.json" 2>&1 | tail -1
        .venv/bin/python "$D/prompt_faults.py" 20 2>&1 | grep -v '^round'
        git checkout -q "$NEW" -- python/comfy_airlock/supervisor.py
    done
done

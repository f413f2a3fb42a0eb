#!/usr/bin/env bash
# bench/prompt.py (2 rounds x 3 prompts per server) with python/ of this stop's head ("new",
# 9de73f5) and of the stop before it ("old", b745260; the same extension, which only adds
# functions), alternating twice. Run from the repository root on a clean tree; output: ab.txt.
set -euo pipefail
D=bench/results/issue20-prompt-check
for i in 1 2; do
    for which in new old; do
        [[ $which == old ]] && git checkout -q b745260 -- python/
        echo "== $which $i"
        .venv/bin/python bench/prompt.py --rounds 2 --prompts 3 --out "$D/prompt-$which-$i.json" 2>&1 | tail -1
        git checkout -q 9de73f5 -- python/
    done
done

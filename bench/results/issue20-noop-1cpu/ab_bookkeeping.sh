#!/usr/bin/env bash
# The no-op on one CPU (noop_comfy.py) and the worker's bookkeeping timed inside it
# (bookkeeping.py), with the worker's per-call bookkeeping of commit 92e059a ("new") and of the
# commit before it ("old"), alternating twice. Run from the repository root on a clean tree;
# output: ab_bookkeeping.txt. Workers copy comfy_airlock from the tree at their start, so
# swapping the three files between runs is what changes.
set -euo pipefail
PY=.envs/bench/bin/python
FILES=(python/comfy_airlock/worker/models.py python/comfy_airlock/worker/floor.py python/comfy_airlock/worker/ram.py)
D=bench/results/issue20-noop-1cpu
for i in 1 2; do
    for which in new old; do
        if [[ $which == old ]]; then
            for f in "${FILES[@]}"; do git show "92e059a~1:$f" >"$f"; done
        fi
        echo "== $which $i"
        "$PY" "$D/noop_comfy.py" | grep floor
        "$PY" "$D/bookkeeping.py" | grep wrapped
        git checkout -q 92e059a -- "${FILES[@]}"
    done
done

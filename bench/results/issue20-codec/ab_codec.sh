#!/usr/bin/env bash
# small.py with the tensor codec (python/comfy_airlock/values.py) of commit 1d1cb50 ("new":
# a contiguous tensor skips the general layout rule, detach only what requires grad, one pass
# over a received layout) and of the commit before it ("old"; the finalizer merge of d3f52fd
# in both), alternating twice. Run from the repository root on a clean tree; output:
# ab_codec.txt.
set -euo pipefail
PY=.envs/bench/bin/python
F=python/comfy_airlock/values.py
D=bench/results/issue20-codec
for i in 1 2; do
    for which in new old; do
        [[ $which == old ]] && git show "1d1cb50~1:$F" >"$F"
        echo "== $which $i"
        "$PY" "$D/small.py"
        git checkout -q 1d1cb50 -- "$F"
    done
done

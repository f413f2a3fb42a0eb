#!/usr/bin/env bash
# bench/results/issue20-prompt-check/crossing_12mib.py (a 12 MiB IMAGE crossing a warm worker,
# p50 of 80 calls, two passes) with the worker's heap knobs ("new", 34194bf) and without them
# ("old": its parent's supervisor.py), alternating twice. From the repository root on a clean
# tree; output: ab_crossing.txt.
set -euo pipefail
NEW=34194bf
for i in 1 2; do
    for which in new old; do
        [[ $which == old ]] && git checkout -q "$NEW~1" -- python/comfy_airlock/supervisor.py
        echo "== $which $i $(date -u +%H:%M:%SZ) load $(cut -d' ' -f1 /proc/loadavg)"
        .envs/bench/bin/python bench/results/issue20-prompt-check/crossing_12mib.py 2>&1 | grep noop
        git checkout -q "$NEW" -- python/comfy_airlock/supervisor.py
    done
done

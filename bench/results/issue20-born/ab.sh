#!/usr/bin/env bash
# Outputs born in shared memory (ADR 0044), on ("on") and off ("off": AIRLOCK_BORN_MIB=0, so
# the worker starts without libairlock_born.so and copies each output once), alternating:
#   1. the fresh-output rows and the 1 MiB echo, comfy-airlock alone (bench/compare.py);
#   2. where a fresh 1 MiB output's time goes (bench/fresh_parts.py);
#   3. the prompt over HTTP, isolated against native (bench/prompt.py).
# Then once, born on, the same rows beside the pickle worker and pyisolate (the best peers on
# these rows in earlier runs). Run from the repository root after `make build` and
# `bash bench/setup.sh`; output: ab.txt and the json/md beside it.
set -euo pipefail
D=bench/results/issue20-born
B=.envs/bench/bin/python
CASES=fresh_1048576,fresh_67108864,fresh_536870912,echo_1048576
for i in 1 2; do
    for which in on off; do
        if [[ $which == off ]]; then export AIRLOCK_BORN_MIB=0; else unset AIRLOCK_BORN_MIB; fi
        echo "== $which $i $(date -u +%H:%M:%SZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
        $B bench/compare.py --systems airlock --cases "$CASES" --rounds 3 \
            --out "$D/compare-$which-$i.json" 2>&1 | grep -E '^\| (fresh|echo)'
        $B bench/fresh_parts.py --rounds 3 2>&1 | tail -3
        .venv/bin/python bench/prompt.py --rounds 4 --prompts 5 --out "$D/prompt-$which-$i.json" \
            2>&1 | tail -1
    done
done
unset AIRLOCK_BORN_MIB
echo "== peers $(date -u +%H:%M:%SZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
$B bench/compare.py --systems airlock,pickle,pyisolate --cases "$CASES" --rounds 3 \
    --out "$D/compare-peers.json" 2>&1 | grep -E '^\| (fresh|echo)|^- '

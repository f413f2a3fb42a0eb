#!/bin/bash
# A/B: the build before the route lane (b7a1d68, /tmp/old) against the four-lane build (main), alternating.
cd /work/main
out=bench/results/issue20-four-lanes
for i in 1 2 3; do
  for side in old new; do
    echo "== $side $i load $(cut -d' ' -f1-3 /proc/loadavg) $(date -u +%H:%M:%S)"
    if [ $side = old ]; then pp=/tmp/old/python; else pp=; fi
    PYTHONPATH=$pp .envs/bench/bin/python bench/compare.py --cases noop_same,noop_sched --rounds 3 --systems airlock,pickle --out $out/ab-noop-$side-$i.json > $out/ab-noop-$side-$i.log 2>&1
    grep -E "no-op call.*p50" $out/ab-noop-$side-$i.log | awk -F'|' '{print $2 "|" $3 "|" $4 "|" $5 "|" $6}'
  done
done
echo "== end load $(cut -d' ' -f1-3 /proc/loadavg) $(date -u +%H:%M:%S)"

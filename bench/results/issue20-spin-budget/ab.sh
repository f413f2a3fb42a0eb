cd /work/main
for r in 1 2 3; do for s in 50 200; do
AIRLOCK_LANE_SPIN_US=$s .envs/bench/bin/python bench/compare.py --quick --systems airlock,pickle --cases noop_sched,noop_same,fresh_1048576,echo_1048576,resend_64,node_image,small_dict --out /tmp/ab/spin$s-r$r.json > /tmp/ab/spin$s-r$r.txt 2>&1
done; done
echo done > /tmp/ab/finished

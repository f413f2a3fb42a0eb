//! The policy's cost: `plan` over 100 worker models (the brief's bound is "well under 1 ms").
//! Run with `cargo bench -p airlock-arbiter`; prints the median and worst of many runs, and
//! asserts nothing about time.

use std::hint::black_box;
use std::time::Instant;

use airlock_arbiter::{Candidate, ModelKey, plan};

fn models(n: u64) -> Vec<Candidate> {
    // A fixed pseudo-random mix of owners, sizes, ages and states.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Candidate {
                key: ModelKey {
                    owner: format!("pack-{}", x % 8),
                    generation: 1 + x % 3,
                    model: i,
                },
                resident: (x % 4096 + 1) << 20,
                in_use: x % 11 == 0,
                last_used: (x % 1000) as f64 / 10.0,
                owner_idle: x % 3 == 0,
                owner_is_requester: x % 8 == 0,
                partial_ok: x % 2 == 0,
            }
        })
        .collect()
}

fn main() {
    for n in [10u64, 100, 1000] {
        let cands = models(n);
        let total: u64 = cands.iter().map(|c| c.resident).sum();
        // Need everything: the whole order is walked (the worst case).
        let need = total + 1;
        let mut times = Vec::new();
        let mut len = 0;
        for _ in 0..2000 {
            let t = Instant::now();
            len = black_box(plan(black_box(need), 0, black_box(&cands))).len();
            times.push(t.elapsed());
        }
        times.sort();
        println!(
            "plan over {n} models ({len} evictable): median {:?}, p99 {:?}, max {:?}",
            times[times.len() / 2],
            times[times.len() * 99 / 100],
            times[times.len() - 1]
        );
    }
}

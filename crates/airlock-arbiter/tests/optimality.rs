//! Property tests over small random instances: the executor obeys the policy, never touches
//! a model in use, stops at the minimum, and evicts at most the optimum plus one model.

#![cfg(not(loom))]

mod common;

use airlock_arbiter::eviction_order::{Tier, tier};
use airlock_arbiter::{Candidate, free_room, order, plan};
use common::{FakeCard, key};
use proptest::prelude::*;

const OWNERS: [&str; 3] = ["me", "b", "c"];

#[derive(Debug, Clone)]
struct Instance {
    cands: Vec<Candidate>,
    refuse: Vec<bool>,
    free: u64,
    need: u64,
    grain: u64,
}

fn instance() -> impl Strategy<Value = Instance> {
    let cand = (
        0usize..3,
        0u64..9,
        prop::bool::weighted(0.2),
        0u8..6,
        any::<bool>(),
        any::<bool>(),
        prop::bool::weighted(0.15),
    );
    (
        prop::collection::vec(cand, 0..9),
        0u64..20,
        0u64..45,
        1u64..4,
    )
        .prop_map(|(rows, free, need, grain)| {
            let mut cands = Vec::new();
            let mut refuse = Vec::new();
            for (i, (owner, resident, in_use, last, idle, partial, refuses)) in
                rows.into_iter().enumerate()
            {
                cands.push(Candidate {
                    key: key(OWNERS[owner], i as u64),
                    resident,
                    in_use,
                    last_used: f64::from(last),
                    owner_idle: idle && owner != 0,
                    owner_is_requester: owner == 0,
                    partial_ok: partial,
                });
                refuse.push(refuses);
            }
            Instance {
                cands,
                refuse,
                free,
                need,
                grain,
            }
        })
}

/// The least bytes any choice of evictions could free to cover `deficit`, counting only
/// models that would not refuse; `None` when even all of them are not enough. A model that
/// can be unloaded in part costs only what is still missing after the full ones.
fn optimum(inst: &Instance, deficit: u64) -> Option<u64> {
    let pool: Vec<&Candidate> = inst
        .cands
        .iter()
        .zip(&inst.refuse)
        .filter(|(c, r)| c.evictable() && !**r)
        .map(|(c, _)| c)
        .collect();
    let mut best: Option<u64> = None;
    for mask in 0u32..(1 << pool.len()) {
        let chosen = pool
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0);
        let (mut all, mut full) = (0u64, 0u64);
        for (_, c) in chosen {
            all += c.resident;
            if !c.partial_ok {
                full += c.resident;
            }
        }
        if all >= deficit {
            let cost = full.max(deficit);
            best = Some(best.map_or(cost, |b| b.min(cost)));
        }
    }
    best
}

fn run(inst: &Instance) -> (airlock_arbiter::Outcome, FakeCard) {
    let mut card = FakeCard::new(inst.free, &inst.cands);
    card.grain = inst.grain;
    for (c, r) in inst.cands.iter().zip(&inst.refuse) {
        if *r {
            card.refuse.insert(c.key.clone());
        }
    }
    let out = free_room(inst.need, &inst.cands, &mut card).expect("the fake truth never fails");
    (out, card)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_order_is_the_policy(inst in instance()) {
        let ord = order(&inst.cands);
        let evictable = inst.cands.iter().filter(|c| c.evictable()).count();
        prop_assert_eq!(ord.len(), evictable);
        for w in ord.windows(2) {
            let (a, b) = (&inst.cands[w[0]], &inst.cands[w[1]]);
            prop_assert!(tier(a) <= tier(b));
            if tier(a) == tier(b) {
                prop_assert!(a.last_used <= b.last_used);
            }
        }
        for &i in &ord {
            let c = &inst.cands[i];
            prop_assert!(!c.in_use && c.resident > 0);
            prop_assert_eq!(tier(c) == Tier::Requester, c.key.owner == "me");
        }
    }

    #[test]
    fn stops_at_the_minimum_within_one_model_of_optimal(inst in instance()) {
        let (out, card) = run(&inst);
        // Steps are a prefix of the policy order, each model asked at most once.
        let ord = order(&inst.cands);
        let idx: Vec<usize> = out.steps.iter().map(|s| s.index).collect();
        prop_assert_eq!(&idx[..], &ord[..idx.len()]);
        prop_assert_eq!(card.asked.len(), out.steps.len());

        if inst.free >= inst.need {
            prop_assert!(out.steps.is_empty());
            prop_assert!(out.satisfied);
            return Ok(());
        }
        // Before every step free memory was short (nothing is evicted once it suffices).
        let mut free = inst.free;
        for s in &out.steps {
            prop_assert!(free < inst.need);
            free += s.freed;
        }
        prop_assert_eq!(free, out.free_after);

        let deficit = inst.need - inst.free;
        let evicted = out.freed();
        match optimum(&inst, deficit) {
            Some(opt) => {
                prop_assert!(out.satisfied);
                let largest = inst.cands.iter().map(|c| c.resident).max().unwrap_or(0);
                prop_assert!(
                    evicted <= opt + largest,
                    "evicted {} > optimal {} + largest {}", evicted, opt, largest
                );
                // Sharper: the overshoot is less than what the last step freed.
                let last = out.steps.last().map_or(0, |s| s.freed);
                prop_assert!(evicted < deficit + last || evicted == deficit);
            }
            None => {
                // Not enough anywhere: every evictable model was asked, and it says so.
                prop_assert!(!out.satisfied);
                prop_assert_eq!(out.steps.len(), ord.len());
                prop_assert_eq!(out.shortfall(), inst.need - out.free_after);
            }
        }
    }

    #[test]
    fn plan_is_what_the_executor_does_when_nothing_refuses(inst in instance()) {
        let mut inst = inst;
        inst.refuse.iter_mut().for_each(|r| *r = false);
        inst.grain = 1;
        let (out, _) = run(&inst);
        let idx: Vec<usize> = out.steps.iter().map(|s| s.index).collect();
        prop_assert_eq!(plan(inst.need, inst.free, &inst.cands), idx);
    }
}

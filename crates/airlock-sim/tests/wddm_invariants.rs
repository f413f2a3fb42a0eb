//! Property: on a WDDM card, whatever sequence of bookings, releases, starts, exits and
//! re-partitions processes make, each reading obeys the model of ADR 0008:
//!
//! - a start pins the starter's budget (`true free + pinned_bias`) and re-partitions every
//!   other attached process to `true free + repartition_bias`;
//! - an exit or an explicit re-partition sets every remaining budget that way;
//! - otherwise a process's reading moves 1:1 with its own bookings and not at all with others';
//! - a process not attached reads `true free + pinned_bias`;
//! - every growth past the card's total is charged as demotions, byte for byte;
//!
//! readings clamped to `[0, total]`.

use airlock_sim::{CardSpec, Semantics, SimGpu, WddmParams};
use proptest::collection::vec;
use proptest::prelude::*;

const TOTAL: u64 = 1000;
const PINNED: i64 = -50;
const REPART: i64 = 30;
const PIDS: [u32; 4] = [1, 2, 3, 4];

#[derive(Debug, Clone)]
enum Op {
    Book(u32, &'static str, u64),
    Add(u32, &'static str, i64),
    Release(u32, &'static str),
    Attach(u32),
    Exit(u32),
    Repartition,
}

fn op() -> impl Strategy<Value = Op> {
    let pid = prop::sample::select(PIDS.to_vec());
    let tag = prop::sample::select(vec!["a", "b"]);
    prop_oneof![
        4 => (pid.clone(), tag.clone(), 0u64..500).prop_map(|(p, t, b)| Op::Book(p, t, b)),
        3 => (pid.clone(), tag.clone(), -200i64..300).prop_map(|(p, t, d)| Op::Add(p, t, d)),
        1 => (pid.clone(), tag).prop_map(|(p, t)| Op::Release(p, t)),
        1 => pid.clone().prop_map(Op::Attach),
        1 => pid.prop_map(Op::Exit),
        1 => Just(Op::Repartition),
    ]
}

/// What the card looked like from outside at one moment.
#[derive(Debug, Clone)]
struct Snap {
    used: u64,
    view: Vec<u64>,
    own: Vec<u64>,
    attached: Vec<bool>,
    demoted: u64,
    demotions: u64,
    repartitions: u64,
}

fn snap(g: &SimGpu) -> Snap {
    let attached: Vec<u32> = g.process_views().iter().map(|v| v.pid).collect();
    Snap {
        used: g.used(),
        view: PIDS.iter().map(|&p| g.free_seen_by(p)).collect(),
        own: PIDS.iter().map(|&p| g.used_by(p)).collect(),
        attached: PIDS.iter().map(|p| attached.contains(p)).collect(),
        demoted: g.demotions_total().bytes,
        demotions: g.demotions_total().count,
        repartitions: g.repartitions(),
    }
}

fn clamp(x: i64) -> u64 {
    x.clamp(0, TOTAL as i64) as u64
}

fn true_free(used: u64) -> i64 {
    TOTAL as i64 - used as i64
}

fn run(g: &SimGpu, op: &Op) -> bool {
    match *op {
        Op::Book(p, t, b) => g.book(p, t, b).is_ok(),
        Op::Add(p, t, d) => g.add(p, t, d).is_ok(),
        Op::Release(p, t) => g.release(p, t).is_ok(),
        Op::Attach(p) => g.attach(p).is_ok(),
        Op::Exit(p) => {
            g.release_process(p);
            true
        }
        Op::Repartition => {
            g.repartition();
            true
        }
    }
}

fn check(op: &Op, ok: bool, a: &Snap, b: &Snap) -> Result<(), TestCaseError> {
    let actor = match *op {
        Op::Book(p, ..) | Op::Add(p, ..) | Op::Release(p, _) | Op::Attach(p) | Op::Exit(p) => {
            PIDS.iter().position(|&q| q == p)
        }
        Op::Repartition => None,
    };
    let started = actor.is_some_and(|i| !a.attached[i] && b.attached[i]);
    let exited = matches!(op, Op::Exit(_)) && actor.is_some_and(|i| a.attached[i]);
    let everyone = exited || matches!(op, Op::Repartition);
    prop_assert!(ok || !started, "a failed op started a process");
    if matches!(op, Op::Exit(_)) {
        prop_assert!(!b.attached[actor.unwrap()]);
    }
    let events = u64::from(started || everyone);
    prop_assert_eq!(b.repartitions, a.repartitions + events);

    for i in 0..PIDS.len() {
        let (before, after) = (a.view[i], b.view[i]);
        if !b.attached[i] {
            prop_assert_eq!(after, clamp(true_free(b.used) + PINNED + b.own[i] as i64));
        } else if Some(i) == actor && started {
            // Pinned at its start, then debited by its own growth.
            let pinned = true_free(a.used) + PINNED + a.own[i] as i64;
            prop_assert_eq!(after, clamp(pinned - b.own[i] as i64));
        } else if everyone {
            prop_assert_eq!(after, clamp(true_free(b.used) + REPART));
        } else if started {
            // Re-partitioned at the actor's start, before its booking: blind to that.
            prop_assert_eq!(after, clamp(true_free(a.used) + REPART));
        } else if Some(i) == actor {
            let expected = before as i64 - (b.own[i] as i64 - a.own[i] as i64);
            if before > 0 && before < TOTAL && (0..=TOTAL as i64).contains(&expected) {
                prop_assert_eq!(after as i64, expected, "1:1 with its own bookings");
            }
        } else {
            prop_assert_eq!(after, before, "blind to pid {:?}", actor.map(|j| PIDS[j]));
        }
    }

    // Over-admission is charged byte for byte.
    let growth = actor.map_or(0, |i| b.own[i].saturating_sub(a.own[i]));
    let past = growth.min((a.used + growth).saturating_sub(TOTAL));
    prop_assert_eq!(b.demoted, a.demoted + past);
    prop_assert_eq!(b.demotions > a.demotions, past > 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn readings_follow_the_wddm_model(ops in vec(op(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let params = WddmParams { pinned_bias: PINNED, repartition_bias: REPART, repartition_below: 0 };
        let spec = CardSpec::new("sim0", TOTAL).with_semantics(Semantics::Wddm(params));
        let g = SimGpu::create_with(dir.path().join("gpu"), &spec).unwrap();
        for op in &ops {
            let before = snap(&g);
            let ok = run(&g, op);
            let after = snap(&g);
            prop_assert_eq!(after.used, after.own.iter().sum::<u64>());
            check(op, ok, &before, &after)?;
            let charged: u64 = g.process_views().iter().map(|v| v.demotions.bytes).sum();
            prop_assert!(charged <= after.demoted);
        }
        for p in PIDS {
            g.release_process(p);
        }
        prop_assert_eq!((g.used(), g.slots_in_use(), g.processes_attached()), (0, 0, 0));
    }
}

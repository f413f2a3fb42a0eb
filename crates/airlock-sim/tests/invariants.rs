//! Property: whatever sequence of bookings, adjustments and releases processes make, the card
//! agrees with a plain map of `(pid, tag) -> bytes`: `used` is its sum, `free` is `total - used`
//! (never below zero), `used_by` and `bookings` match it, a checked booking fails exactly when
//! its growth exceeds the free memory, and freeing more than is booked is refused.

use std::collections::BTreeMap;

use airlock_sim::{Booking, SimError, SimGpu};
use proptest::collection::vec;
use proptest::prelude::*;

const TOTAL: u64 = 1000;

#[derive(Debug, Clone)]
enum Op {
    Book(u32, &'static str, u64),
    BookChecked(u32, &'static str, u64),
    Add(u32, &'static str, i64),
    Release(u32, &'static str),
    ReleaseProcess(u32),
}

fn op() -> impl Strategy<Value = Op> {
    let pid = 1u32..4;
    let tag = prop::sample::select(vec!["a", "b", "", "model/ünïcode"]);
    prop_oneof![
        3 => (pid.clone(), tag.clone(), 0u64..600).prop_map(|(p, t, b)| Op::Book(p, t, b)),
        3 => (pid.clone(), tag.clone(), 0u64..600).prop_map(|(p, t, b)| Op::BookChecked(p, t, b)),
        3 => (pid.clone(), tag.clone(), -300i64..300).prop_map(|(p, t, d)| Op::Add(p, t, d)),
        1 => (pid.clone(), tag).prop_map(|(p, t)| Op::Release(p, t)),
        1 => pid.prop_map(Op::ReleaseProcess),
    ]
}

type Model = BTreeMap<(u32, String), u64>;

fn apply(g: &SimGpu, model: &mut Model, op: &Op) -> Result<(), TestCaseError> {
    let used: u64 = model.values().sum();
    match *op {
        Op::Book(p, t, b) => {
            let old = g.book(p, t, b).map_err(fail)?;
            prop_assert_eq!(old, model.get(&(p, t.into())).copied().unwrap_or(0));
            model.insert((p, t.into()), b);
        }
        Op::BookChecked(p, t, b) => {
            let cur = model.get(&(p, t.into())).copied().unwrap_or(0);
            let growth = b.saturating_sub(cur);
            let free = TOTAL.saturating_sub(used);
            match g.book_checked(p, t, b) {
                Ok(old) => {
                    prop_assert!(growth <= free, "admitted {} with {} free", growth, free);
                    prop_assert_eq!(old, cur);
                    model.insert((p, t.into()), b);
                }
                Err(SimError::OutOfMemory {
                    requested, free: f, ..
                }) => {
                    prop_assert!(growth > free, "refused {} with {} free", growth, free);
                    prop_assert_eq!((requested, f), (growth, free));
                }
                Err(e) => return Err(fail(e)),
            }
        }
        Op::Add(p, t, d) => {
            let cur = model.get(&(p, t.into())).copied().unwrap_or(0);
            match (g.add(p, t, d), cur.checked_add_signed(d)) {
                (Ok(new), Some(want)) => {
                    prop_assert_eq!(new, want);
                    model.insert((p, t.into()), want);
                }
                (Err(SimError::Underflow { booked, .. }), None) => prop_assert_eq!(booked, cur),
                (got, want) => prop_assert!(false, "add gave {:?}, model {:?}", got, want),
            }
        }
        Op::Release(p, t) => {
            let was = g.release(p, t).map_err(fail)?;
            prop_assert_eq!(was, model.remove(&(p, t.into())).unwrap_or(0));
        }
        Op::ReleaseProcess(p) => {
            let want: u64 = model.iter().filter(|(k, _)| k.0 == p).map(|(_, b)| b).sum();
            model.retain(|k, _| k.0 != p);
            prop_assert_eq!(g.release_process(p), want);
        }
    }
    model.retain(|_, b| *b > 0);
    Ok(())
}

fn fail(e: SimError) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

fn check(g: &SimGpu, model: &Model) -> Result<(), TestCaseError> {
    let used: u64 = model.values().sum();
    prop_assert_eq!(g.used(), used);
    prop_assert_eq!(g.free(), TOTAL.saturating_sub(used));
    for pid in 1..4 {
        let want: u64 = model
            .iter()
            .filter(|(k, _)| k.0 == pid)
            .map(|(_, b)| b)
            .sum();
        prop_assert_eq!(g.used_by(pid), want);
    }
    let mut got = g.bookings();
    got.sort_by(|a, b| (a.pid, &a.tag).cmp(&(b.pid, &b.tag)));
    let want: Vec<Booking> = model
        .iter()
        .map(|((pid, tag), bytes)| Booking {
            pid: *pid,
            tag: tag.clone(),
            bytes: *bytes,
        })
        .collect();
    prop_assert_eq!(got, want);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn the_card_is_the_sum_of_its_bookings(ops in vec(op(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let g = SimGpu::create(dir.path().join("gpu"), "sim0", TOTAL).unwrap();
        let mut model = Model::new();
        for op in &ops {
            apply(&g, &mut model, op)?;
            check(&g, &model)?;
        }
        // Everything released leaves no slot behind.
        for pid in 1..4 {
            g.release_process(pid);
        }
        prop_assert_eq!(g.used(), 0);
        prop_assert_eq!(g.slots_in_use(), 0);
    }
}

//! The arbiter across threads: one decision at a time, a waiter that re-reads first, holds,
//! re-entrance, and a stress run with concurrent evictions and loads.

#![cfg(not(loom))]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::Duration;

use airlock_arbiter::{
    Arbiter, ArbiterError, Candidate, Card, ModelKey, Refusal, Stats, TruthError,
};
use common::{FakeCard, cand};

/// Polls `cond` on the arbiter's stats, yielding between reads (no clock involved).
fn wait_for(arbiter: &Arbiter, cond: impl Fn(&Stats) -> bool) {
    while !cond(&arbiter.stats()) {
        thread::yield_now();
    }
}

#[test]
fn a_waiter_rereads_free_memory_and_may_need_nothing() {
    let arbiter = Arc::new(Arbiter::new());
    let cands = vec![cand("a", 1, 8, 1.0), cand("b", 2, 8, 2.0)];
    let card = Arc::new(Mutex::new(FakeCard::new(2, &cands)));

    let turn = arbiter.enter().unwrap();
    let waiter = {
        let (arbiter, card, cands) = (arbiter.clone(), card.clone(), cands.clone());
        thread::spawn(move || {
            let mut card = SharedCard(card);
            arbiter.free_room(6, &cands, &mut card).unwrap()
        })
    };
    wait_for(&arbiter, |s| s.waiting == 1);
    // The first decision frees a model while the second waits.
    let first = turn
        .free_room(6, &cands, &mut SharedCard(card.clone()))
        .unwrap();
    assert_eq!(first.steps.len(), 1);
    let second = waiter.join().unwrap();
    assert!(second.satisfied);
    assert!(
        second.steps.is_empty(),
        "it re-read free memory: {second:?}"
    );
    let s = arbiter.stats();
    assert_eq!((s.decisions, s.waits, s.steps, s.bytes_freed), (2, 1, 1, 8));
    assert!(!s.in_flight);
    assert_eq!(s.waiting, 0);
}

struct SharedCard(Arc<Mutex<FakeCard>>);

impl Card for SharedCard {
    fn true_free(&mut self) -> Result<u64, TruthError> {
        self.0.lock().unwrap().true_free()
    }
    fn evict(&mut self, c: &Candidate, want: u64) -> Result<u64, Refusal> {
        self.0.lock().unwrap().evict(c, want)
    }
}

#[test]
fn a_card_that_calls_back_in_is_refused_not_deadlocked() {
    struct Reentering<'a> {
        arbiter: &'a Arbiter,
        inner: FakeCard,
        nested: Option<Result<(), ArbiterError>>,
    }
    impl Card for Reentering<'_> {
        fn true_free(&mut self) -> Result<u64, TruthError> {
            self.inner.true_free()
        }
        fn evict(&mut self, c: &Candidate, want: u64) -> Result<u64, Refusal> {
            let mut inner = FakeCard::new(0, &[]);
            self.nested = Some(self.arbiter.free_room(1, &[], &mut inner).map(|_| ()));
            self.inner.evict(c, want)
        }
    }
    let arbiter = Arbiter::new();
    let cands = vec![cand("a", 1, 8, 1.0)];
    let mut card = Reentering {
        arbiter: &arbiter,
        inner: FakeCard::new(0, &cands),
        nested: None,
    };
    let out = arbiter.free_room(4, &cands, &mut card).unwrap();
    assert!(out.satisfied);
    assert_eq!(card.nested, Some(Err(ArbiterError::Reentrant)));
    assert_eq!(arbiter.stats().reentries, 1);
    // The turn came back: the next decision runs.
    assert!(
        arbiter
            .free_room(0, &[], &mut FakeCard::new(0, &[]))
            .is_ok()
    );
}

#[test]
fn the_turn_comes_back_when_a_card_panics() {
    struct Panicking;
    impl Card for Panicking {
        fn true_free(&mut self) -> Result<u64, TruthError> {
            Ok(0)
        }
        fn evict(&mut self, _: &Candidate, _: u64) -> Result<u64, Refusal> {
            panic!("card bug");
        }
    }
    let arbiter = Arbiter::new();
    let cands = vec![cand("a", 1, 8, 1.0)];
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        arbiter.free_room(4, &cands, &mut Panicking)
    }));
    assert!(r.is_err());
    assert!(!arbiter.stats().in_flight);
    let out = arbiter
        .free_room(4, &cands, &mut FakeCard::new(0, &cands))
        .unwrap();
    assert!(out.satisfied);
}

#[test]
fn holds_count_against_later_decisions_until_released() {
    let arbiter = Arbiter::new();
    let cands = vec![cand("a", 1, 5, 1.0), cand("b", 2, 5, 2.0)];
    let mut card = FakeCard::new(6, &cands);
    let first = arbiter.admit(5, &cands, &mut card).unwrap();
    assert!(first.outcome.steps.is_empty());
    let hold = first.hold.expect("satisfied admissions hold their bytes");
    // 6 free but 5 promised: the second admission has to evict.
    let second = arbiter.admit(5, &cands, &mut card).unwrap();
    assert_eq!(second.outcome.held, 5);
    assert_eq!(second.outcome.steps.len(), 1);
    assert!(second.outcome.satisfied);
    assert_eq!(arbiter.stats().held_bytes, 10);
    assert_eq!(arbiter.release(hold), Some(5));
    assert_eq!(arbiter.release(hold), None);
    assert_eq!(arbiter.release(second.hold.unwrap()), Some(5));
    assert_eq!(arbiter.stats().holds, 0);
    // An unsatisfied admission holds nothing.
    let third = arbiter.admit(100, &cands, &mut card).unwrap();
    assert!(!third.outcome.satisfied);
    assert_eq!(third.hold, None);
}

/// A card shared by every thread of the stress run: models of four workers, loads booked
/// after admission, evictions by the arbiter and, concurrently, by "upstream".
struct Shared {
    total: u64,
    free: u64,
    models: BTreeMap<ModelKey, (u64, bool)>,
    over_admissions: u64,
    freed_for_arbiter: u64,
}

impl Shared {
    fn check(&self) {
        let resident: u64 = self.models.values().map(|(r, _)| r).sum();
        assert_eq!(self.free + resident, self.total, "bytes are conserved");
    }
}

struct StressCard {
    shared: Arc<Mutex<Shared>>,
    arbiter: Arc<Arbiter>,
    /// Set by the run's first decision, which holds the turn until another worker waits.
    met: Arc<AtomicBool>,
}

impl Card for StressCard {
    fn true_free(&mut self) -> Result<u64, TruthError> {
        // Contention made certain, not left to the scheduler: on a runner where each thread
        // finishes its rounds within one time slice no decision overlaps another (CI saw
        // `waits: 0`). The run's first decision keeps its turn until another worker queues;
        // every worker asks for a turn in its first round, so one always comes.
        if !self.met.swap(true, Ordering::Relaxed) {
            wait_for(&self.arbiter, |s| s.waiting > 0);
        }
        Ok(self.shared.lock().unwrap().free)
    }
    fn evict(&mut self, c: &Candidate, want: u64) -> Result<u64, Refusal> {
        // Let other threads in between the decision's steps.
        thread::yield_now();
        let mut s = self.shared.lock().unwrap();
        let (resident, busy) = *s.models.get(&c.key).ok_or(Refusal::Gone)?;
        if busy {
            return Err(Refusal::Busy);
        }
        let freed = want.min(resident);
        if freed == resident {
            s.models.remove(&c.key);
        } else {
            s.models.get_mut(&c.key).unwrap().0 -= freed;
        }
        s.free += freed;
        s.freed_for_arbiter += freed;
        s.check();
        Ok(freed)
    }
}

fn snapshot(shared: &Shared, me: &str, clock: u64) -> Vec<Candidate> {
    shared
        .models
        .iter()
        .map(|(k, (resident, busy))| Candidate {
            key: k.clone(),
            resident: *resident,
            in_use: *busy,
            last_used: (k.model % 7) as f64,
            owner_idle: (k.model + clock) % 3 == 0,
            owner_is_requester: k.owner == me,
            partial_ok: k.model % 2 == 0,
        })
        .collect()
}

#[test]
fn stress_four_workers_and_upstream_evicting_concurrently() {
    const WORKERS: usize = 4;
    const ROUNDS: u64 = 400;
    let total = 64 << 20;
    let shared = Arc::new(Mutex::new(Shared {
        total,
        free: total,
        models: BTreeMap::new(),
        over_admissions: 0,
        freed_for_arbiter: 0,
    }));
    let arbiter = Arc::new(Arbiter::new());
    let next_model = Arc::new(AtomicU64::new(1));
    let stop = Arc::new(AtomicBool::new(false));
    let met = Arc::new(AtomicBool::new(false));

    let (done_tx, done_rx) = mpsc::channel();
    let run = {
        let (shared, arbiter, stop) = (shared.clone(), arbiter.clone(), stop.clone());
        thread::spawn(move || {
            let mut handles = Vec::new();
            for w in 0..WORKERS {
                let (shared, arbiter, next_model, met) = (
                    shared.clone(),
                    arbiter.clone(),
                    next_model.clone(),
                    met.clone(),
                );
                handles.push(thread::spawn(move || {
                    let me = format!("w{w}");
                    let mut unsatisfied = 0;
                    for round in 0..ROUNDS {
                        let need = ((round * 7 + w as u64 * 13) % 20 + 1) << 20;
                        let cands = snapshot(&shared.lock().unwrap(), &me, round);
                        let mut card = StressCard {
                            shared: shared.clone(),
                            arbiter: arbiter.clone(),
                            met: met.clone(),
                        };
                        let adm = arbiter.admit(need, &cands, &mut card).unwrap();
                        let Some(hold) = adm.hold else {
                            unsatisfied += 1;
                            continue;
                        };
                        // The load: booked after the turn, racing the other decisions.
                        let model = next_model.fetch_add(1, Ordering::Relaxed);
                        let key = ModelKey {
                            owner: me.clone(),
                            generation: 1,
                            model,
                        };
                        {
                            let mut s = shared.lock().unwrap();
                            if s.free < need {
                                s.over_admissions += 1;
                            } else {
                                s.free -= need;
                                s.models.insert(key.clone(), (need, true));
                            }
                            s.check();
                        }
                        assert_eq!(arbiter.release(hold), Some(need));
                        // The node finishes with it: evictable from now on.
                        if let Some(m) = shared.lock().unwrap().models.get_mut(&key) {
                            m.1 = false;
                        }
                    }
                    unsatisfied
                }));
            }
            // Upstream and dying workers: models disappear outside the arbiter.
            let upstream = {
                let (shared, stop) = (shared.clone(), stop.clone());
                thread::spawn(move || {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        i += 1;
                        let mut s = shared.lock().unwrap();
                        let victim = s
                            .models
                            .iter()
                            .find(|(k, (_, busy))| !busy && (k.model + i) % 5 == 0)
                            .map(|(k, (r, _))| (k.clone(), *r));
                        if let Some((k, r)) = victim {
                            s.models.remove(&k);
                            s.free += r;
                        }
                        s.check();
                        drop(s);
                        thread::yield_now();
                    }
                })
            };
            let unsatisfied: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
            stop.store(true, Ordering::Relaxed);
            upstream.join().unwrap();
            let _ = done_tx.send(unsatisfied);
        })
    };
    // A liveness bound, not a performance one: the run takes well under a second; only a
    // deadlock gets anywhere near two minutes.
    let unsatisfied = match done_rx.recv_timeout(Duration::from_secs(120)) {
        Ok(u) => u,
        Err(_) => panic!("no progress in 120 s: deadlock? {:?}", arbiter.stats()),
    };
    run.join().unwrap();

    let s = shared.lock().unwrap();
    s.check();
    assert_eq!(
        s.over_admissions, 0,
        "an admitted load found its room taken"
    );
    let stats = arbiter.stats();
    assert_eq!(stats.decisions, WORKERS as u64 * ROUNDS);
    assert_eq!(stats.decisions - stats.satisfied, unsatisfied);
    assert_eq!(
        stats.bytes_freed, s.freed_for_arbiter,
        "the arbiter's count is the card's"
    );
    assert_eq!((stats.holds, stats.held_bytes), (0, 0));
    assert!(!stats.in_flight);
    assert!(stats.waits > 0, "the workers never contended: {stats:?}");
    println!("stress: {stats:?}, {unsatisfied} unsatisfied");
}

//! The arbiter's single flight under the loom model checker: every interleaving of two
//! admissions (and, in the second model, a node that starts using a model meanwhile), with the
//! arbiter's real Mutex/Condvar swapped for loom's.
//!
//! Run with `scripts/loom.sh` (`RUSTFLAGS="--cfg loom" cargo test -p airlock-arbiter --release
//! --test loom`). Checked in every interleaving:
//! - no deadlock and no lost wake-up (loom fails a run in which every thread is blocked);
//! - single flight: the card's calls of one decision are never interleaved with another's;
//! - no lock is held across the card: the card reads the arbiter's stats from inside every
//!   eviction, which would deadlock if the arbiter held its mutex;
//! - bytes are conserved (free + resident + loaded = total) and no admitted load finds its
//!   room taken (holds);
//! - a model in use is never evicted; the counters add up.

#![cfg(loom)]

use loom::sync::{Arc, Mutex};
use loom::thread;

use airlock_arbiter::{Arbiter, Candidate, Card, ModelKey, Refusal, TruthError};

const TOTAL: u64 = 10;

struct State {
    free: u64,
    /// Models A and B: (resident, in use).
    models: [(u64, bool); 2],
    loaded: u64,
    /// Which requester made each card call, in order.
    log: Vec<usize>,
    over_admissions: u64,
}

impl State {
    fn check(&self) {
        let resident: u64 = self.models.iter().map(|m| m.0).sum();
        assert_eq!(self.free + resident + self.loaded, TOTAL);
    }
}

struct LoomCard {
    who: usize,
    state: Arc<Mutex<State>>,
    arbiter: Arc<Arbiter>,
}

impl Card for LoomCard {
    fn true_free(&mut self) -> Result<u64, TruthError> {
        let mut s = self.state.lock().unwrap();
        s.log.push(self.who);
        Ok(s.free)
    }

    fn evict(&mut self, c: &Candidate, want: u64) -> Result<u64, Refusal> {
        // From inside the decision: the arbiter is in flight, and its lock is free.
        assert!(self.arbiter.stats().in_flight);
        let mut s = self.state.lock().unwrap();
        s.log.push(self.who);
        let i = c.key.model as usize;
        let (resident, busy) = s.models[i];
        if busy {
            return Err(Refusal::Busy);
        }
        if resident == 0 {
            return Err(Refusal::Gone);
        }
        let freed = want.min(resident);
        s.models[i].0 -= freed;
        s.free += freed;
        s.check();
        Ok(freed)
    }
}

fn candidates() -> Vec<Candidate> {
    (0..2)
        .map(|i| Candidate {
            key: ModelKey {
                owner: ["a", "b"][i].to_owned(),
                generation: 1,
                model: i as u64,
            },
            resident: 4,
            in_use: false,
            last_used: i as f64,
            owner_idle: true,
            owner_is_requester: false,
            partial_ok: false,
        })
        .collect()
}

/// One requester: an admission for `need`, then the load, then the hold's release.
fn request(who: usize, need: u64, state: Arc<Mutex<State>>, arbiter: Arc<Arbiter>) -> bool {
    let mut card = LoomCard {
        who,
        state: state.clone(),
        arbiter: arbiter.clone(),
    };
    let adm = arbiter.admit(need, &candidates(), &mut card).unwrap();
    if let Some(hold) = adm.hold {
        let mut s = state.lock().unwrap();
        if s.free < need {
            s.over_admissions += 1;
        } else {
            s.free -= need;
            s.loaded += need;
        }
        s.check();
        drop(s);
        assert_eq!(arbiter.release(hold), Some(need));
    }
    adm.outcome.satisfied
}

fn check_end(state: &State, arbiter: &Arbiter, decisions: u64) {
    state.check();
    assert_eq!(state.over_admissions, 0);
    // Single flight: once a requester's calls stop, they never resume.
    let mut seen = Vec::new();
    for w in &state.log {
        if seen.last() != Some(w) {
            assert!(!seen.contains(w), "decisions interleaved: {:?}", state.log);
            seen.push(*w);
        }
    }
    let s = arbiter.stats();
    assert_eq!(s.decisions, decisions);
    assert!(s.satisfied >= 1, "the first decision has room to find");
    assert!(!s.in_flight);
    assert_eq!((s.waiting, s.holds, s.held_bytes), (0, 0, 0));
    let resident: u64 = state.models.iter().map(|m| m.0).sum();
    assert_eq!(s.bytes_freed, 8 - resident);
}

fn start() -> (Arc<Mutex<State>>, Arc<Arbiter>) {
    let state = Arc::new(Mutex::new(State {
        free: 2,
        models: [(4, false), (4, false)],
        loaded: 0,
        log: Vec::new(),
        over_admissions: 0,
    }));
    (state, Arc::new(Arbiter::new()))
}

#[test]
fn two_admissions() {
    loom::model(|| {
        let (state, arbiter) = start();
        let t = {
            let (state, arbiter) = (state.clone(), arbiter.clone());
            thread::spawn(move || request(1, 5, state, arbiter))
        };
        request(0, 5, state.clone(), arbiter.clone());
        t.join().unwrap();
        check_end(&state.lock().unwrap(), &arbiter, 2);
    });
}

#[test]
fn two_admissions_while_a_node_takes_a_model() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let (state, arbiter) = start();
        let t = {
            let (state, arbiter) = (state.clone(), arbiter.clone());
            thread::spawn(move || request(1, 5, state, arbiter))
        };
        // A node starts using model B (if it is still there) at any point.
        let node = {
            let state = state.clone();
            thread::spawn(move || {
                let mut s = state.lock().unwrap();
                if s.models[1].0 > 0 {
                    s.models[1].1 = true;
                }
            })
        };
        request(0, 5, state.clone(), arbiter.clone());
        t.join().unwrap();
        node.join().unwrap();
        let s = state.lock().unwrap();
        // A model in use kept every byte.
        if s.models[1].1 {
            assert_eq!(s.models[1].0, 4);
        }
        check_end(&s, &arbiter, 2);
    });
}

//! Single flight: one decision at a time across every thread of the host.
//!
//! Two decisions running at once would both read the same free memory and both evict for it
//! (twice the bytes), or evict the same model twice. So a decision takes the *turn*; a second
//! request waits for it, then re-reads free memory before doing anything (it may need nothing
//! any more). The turn is a flag under a mutex, not a mutex held across the decision: the mutex
//! is held only to read or flip the flag and the counters, never while the [`Card`] runs, so
//! nothing the card calls can block on it; and the flag remembers its owner, so a card that
//! calls back into the arbiter on the same thread gets [`ArbiterError::Reentrant`] instead of
//! waiting on itself. The turn is given back on every exit, unwinding included.
//!
//! Admission has one more race: a request admitted for `need` bytes loads *after* its turn, so
//! the next decision could read the same free memory and admit a second load into it. An
//! [`Arbiter::admit`] therefore leaves a *hold* of `need` bytes, counted against free memory by
//! every later decision until the requester [`Arbiter::release`]s it once its load is done (or
//! failed). Between the load and the release a later decision counts those bytes twice; that
//! errs towards evicting more, never towards over-admission (the seed ADR's one-sided errors).

use std::sync::PoisonError;

use crate::Candidate;
use crate::card::Card;
use crate::decision::{self, ArbiterError, Outcome};
use crate::sync::{Condvar, Mutex, MutexGuard, ThreadId, current_thread};

/// An admission's claim on free memory, until [`Arbiter::release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HoldId(pub u64);

/// A decision made by [`Arbiter::admit`], and the hold it left when satisfied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub outcome: Outcome,
    pub hold: Option<HoldId>,
}

/// Counters since the arbiter was made, and its state now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Decisions made (errors excluded).
    pub decisions: u64,
    /// Decisions that ended with enough free memory.
    pub satisfied: u64,
    /// Evictions asked for, refused ones included.
    pub steps: u64,
    /// Bytes the evictions freed, as their owners measured them.
    pub bytes_freed: u64,
    /// Evictions refused.
    pub refusals: u64,
    /// Requests that found a decision in flight and waited for it.
    pub waits: u64,
    /// Requests refused because their own thread was inside a decision.
    pub reentries: u64,
    /// Decisions that stopped on an error (free memory could not be read).
    pub errors: u64,
    /// Now: a decision is in flight.
    pub in_flight: bool,
    /// Now: requests waiting for the turn.
    pub waiting: u64,
    /// Now: open holds, and the bytes they claim.
    pub holds: u64,
    pub held_bytes: u64,
}

struct State {
    /// The thread whose decision is in flight.
    owner: Option<ThreadId>,
    waiting: u64,
    next_hold: u64,
    holds: Vec<(HoldId, u64)>,
    stats: Stats,
}

impl State {
    fn held_bytes(&self) -> u64 {
        self.holds
            .iter()
            .fold(0u64, |sum, (_, b)| sum.saturating_add(*b))
    }
}

/// Serializes free-room decisions (see the module docs).
pub struct Arbiter {
    state: Mutex<State>,
    turn: Condvar,
}

impl Default for Arbiter {
    fn default() -> Self {
        Self::new()
    }
}

impl Arbiter {
    pub fn new() -> Self {
        Arbiter {
            state: Mutex::new(State {
                owner: None,
                waiting: 0,
                next_hold: 1,
                holds: Vec::new(),
                stats: Stats::default(),
            }),
            turn: Condvar::new(),
        }
    }

    /// The state mutex. Only this module's own short sections hold it, and none of them can
    /// panic half way, so a poisoned lock still holds consistent state.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for the turn (while another thread's decision is in flight) and takes it.
    pub fn enter(&self) -> Result<Turn<'_>, ArbiterError> {
        let me = current_thread();
        let mut s = self.lock();
        if s.owner == Some(me) {
            s.stats.reentries += 1;
            return Err(ArbiterError::Reentrant);
        }
        if s.owner.is_some() {
            s.stats.waits += 1;
            s.waiting += 1;
            while s.owner.is_some() {
                s = self.turn.wait(s).unwrap_or_else(PoisonError::into_inner);
            }
            s.waiting -= 1;
        }
        s.owner = Some(me);
        Ok(Turn {
            arbiter: self,
            held: s.held_bytes(),
        })
    }

    /// One decision (see [`free_room`](crate::free_room)), after waiting for the turn.
    pub fn free_room<C: Card + ?Sized>(
        &self,
        need: u64,
        candidates: &[Candidate],
        card: &mut C,
    ) -> Result<Outcome, ArbiterError> {
        self.enter()?.free_room(need, candidates, card)
    }

    /// A decision for an admission: like [`Arbiter::free_room`], and when satisfied it holds
    /// `need` bytes against later decisions until [`Arbiter::release`].
    pub fn admit<C: Card + ?Sized>(
        &self,
        need: u64,
        candidates: &[Candidate],
        card: &mut C,
    ) -> Result<Admission, ArbiterError> {
        self.enter()?.admit(need, candidates, card)
    }

    /// Gives back a hold (the admitted load is done, or failed). Returns its bytes, or `None`
    /// for a hold that was released already.
    pub fn release(&self, hold: HoldId) -> Option<u64> {
        let mut s = self.lock();
        let i = s.holds.iter().position(|(id, _)| *id == hold)?;
        Some(s.holds.swap_remove(i).1)
    }

    pub fn stats(&self) -> Stats {
        let s = self.lock();
        Stats {
            in_flight: s.owner.is_some(),
            waiting: s.waiting,
            holds: s.holds.len() as u64,
            held_bytes: s.held_bytes(),
            ..s.stats.clone()
        }
    }
}

/// The turn: while it lives, no other decision runs. Dropping it gives the turn back.
pub struct Turn<'a> {
    arbiter: &'a Arbiter,
    /// Bytes held by earlier admissions when the turn was taken.
    held: u64,
}

impl Turn<'_> {
    /// One decision; the turn is given back when it returns.
    pub fn free_room<C: Card + ?Sized>(
        self,
        need: u64,
        candidates: &[Candidate],
        card: &mut C,
    ) -> Result<Outcome, ArbiterError> {
        self.run(need, candidates, card, false).map(|a| a.outcome)
    }

    /// One decision for an admission (see [`Arbiter::admit`]).
    pub fn admit<C: Card + ?Sized>(
        self,
        need: u64,
        candidates: &[Candidate],
        card: &mut C,
    ) -> Result<Admission, ArbiterError> {
        self.run(need, candidates, card, true)
    }

    fn run<C: Card + ?Sized>(
        self,
        need: u64,
        candidates: &[Candidate],
        card: &mut C,
        hold: bool,
    ) -> Result<Admission, ArbiterError> {
        // No lock is held here: the card may take as long as it takes, and may call anything
        // but this arbiter on this thread.
        let result = decision::decide(need, self.held, candidates, card);
        let mut s = self.arbiter.lock();
        let admission = match result {
            Ok(outcome) => {
                let st = &mut s.stats;
                st.decisions += 1;
                st.satisfied += u64::from(outcome.satisfied);
                st.steps += outcome.steps.len() as u64;
                st.bytes_freed = st.bytes_freed.saturating_add(outcome.freed());
                st.refusals += outcome.refusals() as u64;
                let hold = (hold && outcome.satisfied).then(|| {
                    let id = HoldId(s.next_hold);
                    s.next_hold += 1;
                    s.holds.push((id, need));
                    id
                });
                Ok(Admission { outcome, hold })
            }
            Err(e) => {
                s.stats.errors += 1;
                Err(e)
            }
        };
        // The state lock goes before the turn (dropping `self` takes the lock again).
        drop(s);
        admission
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut s = self.arbiter.lock();
        s.owner = None;
        drop(s);
        self.arbiter.turn.notify_one();
    }
}

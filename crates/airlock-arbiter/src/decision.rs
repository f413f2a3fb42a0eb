//! One decision: evict in policy order, re-reading the truth between steps, until it suffices.
//!
//! The executor trusts no bookkeeping: before each step it asks the [`Card`] how much is free
//! now (another process may have freed or taken memory, an eviction may have freed more or less
//! than it said) and stops as soon as that covers the need. Before the last step free memory
//! was short of the need, so the bytes evicted exceed the shortfall by less than one model (and
//! by nothing when that model can be unloaded in part): within one model of the optimum, whose
//! cost is at least the shortfall.

use thiserror::Error;

use crate::card::{Card, Refusal, TruthError};
use crate::{Candidate, ModelKey, eviction_order};

/// One eviction the executor asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Index of the candidate in the slice the decision was given.
    pub index: usize,
    pub key: ModelKey,
    /// Bytes asked: less than the candidate's `resident` for a partial unload, equal for a
    /// full one.
    pub asked: u64,
    /// Bytes freed, as the owner measured them (0 when refused).
    pub freed: u64,
    pub refused: Option<Refusal>,
}

/// What a decision did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Bytes that had to be free.
    pub need: u64,
    /// Bytes already promised to earlier admissions that have not loaded yet (see
    /// [`Arbiter::admit`](crate::Arbiter::admit)): free memory had to cover `need + held`.
    pub held: u64,
    pub steps: Vec<Step>,
    /// The device's true free memory when the decision started, and when it ended.
    pub free_before: u64,
    pub free_after: u64,
    /// `free_after >= need + held`. When false, phase two (upstream's own eviction of the
    /// host's models) has the rest to find.
    pub satisfied: bool,
}

impl Outcome {
    /// Bytes the evictions freed, as measured by their owners.
    pub fn freed(&self) -> u64 {
        self.steps.iter().map(|s| s.freed).sum()
    }

    /// Steps that were refused.
    pub fn refusals(&self) -> usize {
        self.steps.iter().filter(|s| s.refused.is_some()).count()
    }

    /// What is still missing: `need + held - free_after`, 0 when satisfied.
    pub fn shortfall(&self) -> u64 {
        self.need
            .saturating_add(self.held)
            .saturating_sub(self.free_after)
    }
}

/// A decision that could not be made.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ArbiterError {
    #[error(transparent)]
    Truth(#[from] TruthError),
    /// A decision was asked for from inside one of this thread's own evictions: it would wait
    /// for its own turn forever.
    #[error(
        "free_room called from inside an eviction of the decision in flight on this thread \
         (it would wait on itself)"
    )]
    Reentrant,
}

/// Frees room for `need` bytes among `candidates` (one decision, without single flight; see
/// [`Arbiter`](crate::Arbiter) for that).
pub fn free_room<C: Card + ?Sized>(
    need: u64,
    candidates: &[Candidate],
    card: &mut C,
) -> Result<Outcome, ArbiterError> {
    decide(need, 0, candidates, card)
}

/// The executor: `held` bytes are promised elsewhere, so free memory must reach `need + held`.
pub(crate) fn decide<C: Card + ?Sized>(
    need: u64,
    held: u64,
    candidates: &[Candidate],
    card: &mut C,
) -> Result<Outcome, ArbiterError> {
    let target = need.saturating_add(held);
    let free_before = card.true_free()?;
    let mut free = free_before;
    let mut steps = Vec::new();
    if free < target {
        for index in eviction_order::order(candidates) {
            let c = &candidates[index];
            let asked = c.ask(target - free);
            let (freed, refused) = match card.evict(c, asked) {
                Ok(freed) => (freed, None),
                Err(r) => (0, Some(r)),
            };
            steps.push(Step {
                index,
                key: c.key.clone(),
                asked,
                freed,
                refused,
            });
            free = card.true_free()?;
            if free >= target {
                break;
            }
        }
    }
    Ok(Outcome {
        need,
        held,
        steps,
        free_before,
        free_after: free,
        satisfied: free >= target,
    })
}

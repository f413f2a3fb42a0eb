//! The eviction policy: which worker model goes first.
//!
//! 1. Never a model a running node uses, and never one that holds nothing.
//! 2. Models of idle workers before models of busy ones: an idle worker will not need its
//!    model in the next seconds, a busy one may.
//! 3. Within that, least recently used first.
//! 4. The requester's own models last: evicting them to load into the same worker is the most
//!    likely to be undone at once (its running node is about to need them).
//!
//! Ties are broken by [`ModelKey`](crate::ModelKey) so that the order is a function of the
//! snapshot alone. Size plays no part: the executor stops at the minimum whatever the order,
//! so the policy is free to be about *which* models, not how many bytes.

use std::cmp::Ordering;

use crate::Candidate;

/// The policy's rank classes, evicted in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    /// Another worker's model, that worker idle.
    Idle,
    /// Another worker's model, that worker running a call (but not with this model).
    Busy,
    /// The requester's own model.
    Requester,
}

/// The candidate's rank class.
pub fn tier(c: &Candidate) -> Tier {
    if c.owner_is_requester {
        Tier::Requester
    } else if c.owner_idle {
        Tier::Idle
    } else {
        Tier::Busy
    }
}

/// Policy comparison of two evictable candidates: `Less` goes first.
pub fn compare(a: &Candidate, b: &Candidate) -> Ordering {
    tier(a)
        .cmp(&tier(b))
        .then_with(|| a.last_used.total_cmp(&b.last_used))
        .then_with(|| a.key.cmp(&b.key))
}

/// Indices of the evictable candidates, in eviction order.
pub fn order(candidates: &[Candidate]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].evictable())
        .collect();
    idx.sort_unstable_by(|&a, &b| compare(&candidates[a], &candidates[b]));
    idx
}

/// The candidates a decision would evict, in order, if every eviction freed what it was asked
/// and nothing else moved: the prefix of [`order`] that brings `free` to `need` (the last one
/// possibly in part). Empty when `free` already suffices; every evictable candidate when even
/// all of them are not enough.
pub fn plan(need: u64, free: u64, candidates: &[Candidate]) -> Vec<usize> {
    let mut avail = free;
    let mut out = Vec::new();
    for i in order(candidates) {
        if avail >= need {
            break;
        }
        avail = avail.saturating_add(candidates[i].ask(need - avail));
        out.push(i);
    }
    out
}

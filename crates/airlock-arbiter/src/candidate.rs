//! What the arbiter knows about one worker model: a snapshot taken when the decision starts.
//!
//! The snapshot goes stale while the decision runs (a node starts using a model, a worker dies);
//! the [`Card`](crate::Card) is the one that finds out, and answers with a
//! [`Refusal`](crate::Refusal).

use std::fmt;

/// Names one model of one worker generation. A respawned worker restarts its model ids, so the
/// generation is part of the name: a command for a dead generation must never reach its
/// successor.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ModelKey {
    /// The pack whose worker holds the model.
    pub owner: String,
    pub generation: u64,
    pub model: u64,
}

impl fmt::Display for ModelKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "model {} of pack '{}' (generation {})",
            self.model, self.owner, self.generation
        )
    }
}

/// One worker model the arbiter may evict.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub key: ModelKey,
    /// Bytes it holds on the device now.
    pub resident: u64,
    /// A running node uses it: never evicted.
    pub in_use: bool,
    /// When it was last used (seconds, any monotone clock shared by the candidates).
    pub last_used: f64,
    /// Its worker runs no call.
    pub owner_idle: bool,
    /// Its worker is the one asking for room.
    pub owner_is_requester: bool,
    /// It can be unloaded in part (upstream's `partially_unload`), not only whole.
    pub partial_ok: bool,
}

impl Candidate {
    /// Whether the policy may evict it at all: it holds something and no running node uses it.
    pub fn evictable(&self) -> bool {
        !self.in_use && self.resident > 0
    }

    /// The bytes to ask of it when `want` more are needed: `want` when it can be unloaded in
    /// part and holds more than that, else all it holds (a full unload).
    pub fn ask(&self, want: u64) -> u64 {
        if self.partial_ok && self.resident > want {
            want
        } else {
            self.resident
        }
    }
}

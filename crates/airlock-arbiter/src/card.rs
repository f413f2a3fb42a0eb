//! The device as the arbiter sees it: a truth to re-read, and models to evict.
//!
//! The executor calls nothing else. On the host the truth is NVML (or the simulated card), and
//! an eviction is a command on the owning worker's control lane, never on its call lane, so an
//! eviction does not wait for a running node (`docs/adr/0010-arbiter.md`).

use thiserror::Error;

use crate::Candidate;

/// Why a model was not evicted. The executor records it and goes on to the next candidate.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Refusal {
    /// A running node started using it after the snapshot.
    #[error("in use by a running node")]
    Busy,
    /// The worker generation or the model no longer exists.
    #[error("gone (its worker or generation no longer holds it)")]
    Gone,
    /// The owner refused or the command failed, for the reason given.
    #[error("{0}")]
    Declined(String),
}

/// The device's free memory could not be read: the decision stops, since without the truth it
/// cannot know when to stop.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("cannot read the device's free memory: {0}")]
pub struct TruthError(pub String);

/// What the executor acts on. Implementations must not call back into the
/// [`Arbiter`](crate::Arbiter) from the same thread (that is refused as
/// [`ArbiterError::Reentrant`](crate::ArbiterError::Reentrant)), and should bound their own
/// waits: the arbiter's turn is held while they run.
pub trait Card {
    /// Bytes free on the device now, across every process (NVML's view, not a WDDM budget).
    fn true_free(&mut self) -> Result<u64, TruthError>;

    /// Frees about `want` bytes of `candidate`: in part when `want < candidate.resident`
    /// (only asked of a candidate with `partial_ok`), else the whole model. Returns the bytes
    /// actually freed, as the owner measured them.
    fn evict(&mut self, candidate: &Candidate, want: u64) -> Result<u64, Refusal>;
}

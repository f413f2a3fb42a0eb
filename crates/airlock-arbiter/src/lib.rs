//! The arbiter: which worker models to evict, in which order, and one decision at a time.
//!
//! When a worker asks to load (admission, design §4.5) the host first frees room among the
//! models its workers hold ("phase one"); what is still missing afterwards goes to upstream's
//! own `free_memory` over the host's models ("phase two", not here). Phase one is the only place
//! a cross-worker policy can live: upstream sorts by offload fraction, refcount and size, and
//! knows nothing about which worker is idle or which model ran last. comfy-env evicted the
//! largest holder first and had no policy across workers; this crate is the policy and its
//! executor, kept free of Python, lanes and the device so that it can be property-tested and
//! model-checked (`docs/adr/0010-arbiter.md`).
//!
//! - [`eviction_order`]: the policy's order. Never a model a running node uses; models of idle
//!   workers first, then least recently used; the requester's own models last.
//! - [`free_room`]: the executor. Re-reads the device's true free memory ([`Card::true_free`])
//!   before every step and stops as soon as it suffices, so it evicts at most one model more
//!   than the optimum; a refusal (a model that became busy, a worker that died) is skipped.
//! - [`Arbiter`]: single flight. One decision at a time across threads; a request that had to
//!   wait re-reads free memory first and may need nothing. The arbiter waits on nothing but its
//!   own turn, and the only code it runs during a turn is the [`Card`]'s.

mod arbiter;
mod candidate;
mod card;
mod decision;
pub mod eviction_order;
mod sync;

pub use arbiter::{Admission, Arbiter, HoldId, Stats, Turn};
pub use candidate::{Candidate, ModelKey};
pub use card::{Card, Refusal, TruthError};
pub use decision::{ArbiterError, Outcome, Step, free_room};
pub use eviction_order::{order, plan};

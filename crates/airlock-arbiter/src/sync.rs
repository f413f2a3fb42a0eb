//! The synchronization primitives, swapped for loom's under `--cfg loom` so that the model
//! checker explores every interleaving of the arbiter's real code (`tests/loom.rs`).

#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};

#[cfg(loom)]
pub(crate) type ThreadId = loom::thread::ThreadId;
#[cfg(not(loom))]
pub(crate) type ThreadId = std::thread::ThreadId;

/// The calling thread (loom's threads share one OS thread, so they need loom's ids).
pub(crate) fn current_thread() -> ThreadId {
    #[cfg(loom)]
    return loom::thread::current().id();
    #[cfg(not(loom))]
    return std::thread::current().id();
}

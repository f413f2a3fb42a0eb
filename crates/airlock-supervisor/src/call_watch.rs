//! What the host watches while it waits for a reply: ComfyUI's cancel (asked of the host's
//! code through [`CallHost::interrupted`](crate::CallHost::interrupted)), the pack's call
//! deadline, and an interrupt requested from another thread (the binding's
//! `Worker.interrupt()` sets the flag it lends).
//!
//! The wait wakes every [`TICK`] to look; whichever asks first raises the flag in the worker's
//! signal page, and from then on the [`Escalation`] the user configured decides whether the
//! worker gets SIGINT and then SIGKILL. Nothing here blocks on the worker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::escalation::{Escalation, InterruptPolicy, Step};
use crate::process::WorkerProcess;

/// How often a waiting caller looks at the interrupt sources. A node that checks for
/// interrupts stops within this plus its own check interval.
pub const TICK: Duration = Duration::from_millis(10);

/// Why a call was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cause {
    Interrupted,
    Deadline(Duration),
}

/// The interrupt sources of one call, and how far the escalation has gone.
pub struct CallWatch<'a> {
    id: u64,
    deadline: Option<(Instant, Duration)>,
    requested: &'a AtomicBool,
    escalation: Escalation,
    cause: Option<Cause>,
}

impl<'a> CallWatch<'a> {
    /// The watch of call `id`: `deadline` counts from now; `requested` is raised by whoever
    /// wants the call stopped from another thread (taken when seen).
    pub fn new(
        id: u64,
        deadline: Option<Duration>,
        requested: &'a AtomicBool,
        policy: InterruptPolicy,
    ) -> Self {
        CallWatch {
            id,
            deadline: deadline.map(|d| (Instant::now() + d, d)),
            requested,
            escalation: Escalation::new(policy),
            cause: None,
        }
    }

    pub fn cause(&self) -> Option<Cause> {
        self.cause
    }

    pub fn how(&self) -> String {
        self.escalation.describe()
    }

    /// "flag", "signal" or "kill": how far the escalation went.
    pub fn last_step(&self) -> &'static str {
        self.escalation.last_step()
    }

    /// Asks the worker to stop this call (an event handler raised, e.g. ComfyUI's progress
    /// hook on a cancel).
    pub fn stop(&mut self, process: &WorkerProcess, cause: Cause) {
        if self.escalation.flag(Instant::now()) {
            self.cause = Some(cause);
            process.interrupt(self.id);
        }
    }

    /// Looks at every source once (`host_interrupted` last: it may run the host's code); runs
    /// the escalation step that is due.
    pub fn tick(&mut self, process: &WorkerProcess, host_interrupted: impl FnOnce() -> bool) {
        let now = Instant::now();
        if self.escalation.is_flagged() {
            match self.escalation.due(now) {
                Some(Step::Signal) => process.signal_interrupt(),
                Some(Step::Kill) => process.kill(),
                None => {}
            }
            return;
        }
        let cause = if self.requested.swap(false, Ordering::AcqRel) {
            Some(Cause::Interrupted)
        } else if let Some((at, d)) = self.deadline
            && now >= at
        {
            Some(Cause::Deadline(d))
        } else if host_interrupted() {
            Some(Cause::Interrupted)
        } else {
            None
        };
        if let Some(c) = cause {
            self.stop(process, c);
        }
    }

    /// The flag of a call that ended without consuming it is withdrawn.
    pub fn finish(&self, process: &WorkerProcess) {
        if self.escalation.is_flagged() {
            process.clear_interrupt(self.id);
        }
    }
}

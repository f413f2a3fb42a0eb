//! What the host watches while it waits for a reply: ComfyUI's cancel, the pack's call
//! deadline, and [`Worker.interrupt`](crate::host::Worker) from another thread.
//!
//! The wait wakes every [`TICK`] to look; whichever asks first raises the flag in the worker's
//! signal page, and from then on the [`Escalation`] the user configured decides whether the
//! worker gets SIGINT and then SIGKILL. Nothing here blocks on the worker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use airlock_supervisor::{Escalation, InterruptPolicy, Step, WorkerProcess};
use pyo3::prelude::*;

/// How often a waiting caller looks at the interrupt sources. A node that checks for
/// interrupts stops within this plus its own check interval.
pub const TICK: Duration = Duration::from_millis(10);

/// Why a call was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cause {
    Interrupted,
    Deadline(Duration),
}

pub struct CallWatch<'a> {
    id: u64,
    /// `interrupted() -> bool`, e.g. the host's `comfy.model_management.processing_interrupted`.
    interrupted: Option<&'a Bound<'a, PyAny>>,
    deadline: Option<(Instant, Duration)>,
    requested: &'a AtomicBool,
    escalation: Escalation,
    cause: Option<Cause>,
}

impl<'a> CallWatch<'a> {
    pub fn new(
        id: u64,
        interrupted: Option<&'a Bound<'a, PyAny>>,
        deadline: Option<Duration>,
        requested: &'a AtomicBool,
        policy: InterruptPolicy,
    ) -> Self {
        CallWatch {
            id,
            interrupted,
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

    /// Looks at every source once; runs the escalation step that is due.
    pub fn tick(&mut self, py: Python<'_>, process: &WorkerProcess) {
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
        } else if self.host_interrupted(py) {
            Some(Cause::Interrupted)
        } else {
            None
        };
        if let Some(c) = cause {
            self.stop(process, c);
        }
    }

    fn host_interrupted(&mut self, py: Python<'_>) -> bool {
        let Some(f) = self.interrupted else {
            return false;
        };
        match f.call0().and_then(|r| r.is_truthy()) {
            Ok(b) => b,
            Err(e) => {
                // A broken interrupt source must not break the call: it is reported once and
                // not asked again during this call.
                e.write_unraisable(py, Some(f));
                self.interrupted = None;
                false
            }
        }
    }

    /// The flag of a call that ended without consuming it is withdrawn.
    pub fn finish(&self, process: &WorkerProcess) {
        if self.escalation.is_flagged() {
            process.clear_interrupt(self.id);
        }
    }
}

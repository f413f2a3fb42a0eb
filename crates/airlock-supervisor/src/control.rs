//! What a worker's control thread answers from: its latest memory report and the handler for
//! commands. The thread runs without the worker's Python, so heartbeats are answered at once
//! even while a node runs; only a command needs the handler (which, in the Python runtime,
//! takes the GIL between the running node's bytecodes).

use std::sync::{Arc, Mutex};

use airlock_wire::{ModelOp, ModelOutcome, Setting, WorkerReport};

/// A command's outcome and the worker's report taken after it.
pub type CommandResult = (ModelOutcome, Option<WorkerReport>);

/// Runs the host's commands in the worker: one model's ([`ModelOp`]) and the worker's own
/// memory settings ([`Setting`]).
pub trait ModelHandler: Send + Sync {
    fn run(&self, model: u64, op: ModelOp) -> CommandResult;
    fn set(&self, setting: Setting) -> CommandResult;
}

/// What a command from the host asks of the worker.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Command {
    Model(u64, ModelOp),
    Set(Setting),
}

/// Shared by the worker runtime (which publishes and installs) and the control thread (which
/// answers).
pub struct ControlState {
    generation: u64,
    report: Mutex<Option<WorkerReport>>,
    handler: Mutex<Option<Arc<dyn ModelHandler>>>,
}

impl ControlState {
    pub(crate) fn new(generation: u64) -> Self {
        ControlState {
            generation,
            report: Mutex::new(None),
            handler: Mutex::new(None),
        }
    }

    /// The generation the host gave this process; commands for any other are refused.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Replaces the report heartbeats answer with.
    pub fn publish(&self, report: WorkerReport) {
        *self.report.lock().unwrap_or_else(|p| p.into_inner()) = Some(report);
    }

    pub fn report(&self) -> Option<WorkerReport> {
        self.report
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set_handler(&self, handler: Arc<dyn ModelHandler>) {
        *self.handler.lock().unwrap_or_else(|p| p.into_inner()) = Some(handler);
    }

    /// Runs a command, refusing one stamped for another generation before any handler sees it.
    pub(crate) fn run(&self, generation: u64, command: Command) -> CommandResult {
        if generation != self.generation {
            let reason = format!(
                "command for generation {generation} reached generation {}",
                self.generation
            );
            return (ModelOutcome::Refused { reason }, self.report());
        }
        let handler = self
            .handler
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match (handler, command) {
            (Some(h), Command::Model(model, op)) => h.run(model, op),
            (Some(h), Command::Set(setting)) => h.set(setting),
            (None, _) => (
                ModelOutcome::Refused {
                    reason: "this worker holds no models".into(),
                },
                self.report(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Frees;

    fn report(seq: u64) -> WorkerReport {
        WorkerReport {
            pid: 1,
            seq,
            reserved: 0,
            models: Vec::new(),
            pinned: 0,
            rss: None,
            floor: None,
            device_uuid: None,
        }
    }

    impl ModelHandler for Frees {
        fn run(&self, model: u64, _op: ModelOp) -> CommandResult {
            (ModelOutcome::Done { bytes: model }, Some(report(1)))
        }
        fn set(&self, setting: Setting) -> CommandResult {
            let (Setting::PinCeiling { bytes } | Setting::CacheHeadroom { bytes }) = setting;
            (ModelOutcome::Done { bytes }, Some(report(2)))
        }
    }

    #[test]
    fn another_generation_is_refused_before_the_handler() {
        let s = ControlState::new(2);
        s.set_handler(Arc::new(Frees));
        s.publish(report(0));
        let unload = Command::Model(7, ModelOp::Unload);
        let (o, r) = s.run(1, unload);
        assert!(matches!(o, ModelOutcome::Refused { reason } if reason.contains("generation 1")));
        assert_eq!(r, Some(report(0)));
        assert_eq!(s.run(2, unload).0, ModelOutcome::Done { bytes: 7 });
        let pin = Command::Set(Setting::PinCeiling { bytes: 5 });
        assert!(matches!(s.run(1, pin).0, ModelOutcome::Refused { .. }));
        assert_eq!(
            s.run(2, pin),
            (ModelOutcome::Done { bytes: 5 }, Some(report(2)))
        );
    }

    #[test]
    fn no_handler_means_no_models() {
        let s = ControlState::new(1);
        assert!(matches!(
            s.run(1, Command::Model(7, ModelOp::Unload)).0,
            ModelOutcome::Refused { .. }
        ));
        assert_eq!(s.run(1, Command::Model(7, ModelOp::Unload)).1, None);
    }
}

//! What a worker's control thread answers from: its latest memory report and the handler for
//! model commands. The thread runs without the worker's Python, so heartbeats are answered at
//! once even while a node runs; only a model command needs the handler (which, in the Python
//! runtime, takes the GIL between the running node's bytecodes).

use std::sync::{Arc, Mutex};

use airlock_wire::{ModelOp, ModelOutcome, Value};

/// Runs a model command in the worker and returns its outcome and the report after it.
pub trait ModelHandler: Send + Sync {
    fn run(&self, model: u64, op: ModelOp) -> (ModelOutcome, Value);
}

/// Shared by the worker runtime (which publishes and installs) and the control thread (which
/// answers).
pub struct ControlState {
    generation: u64,
    report: Mutex<Value>,
    handler: Mutex<Option<Arc<dyn ModelHandler>>>,
}

impl ControlState {
    pub(crate) fn new(generation: u64) -> Self {
        ControlState {
            generation,
            report: Mutex::new(Value::None),
            handler: Mutex::new(None),
        }
    }

    /// The generation the host gave this process; commands for any other are refused.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Replaces the report heartbeats answer with.
    pub fn publish(&self, report: Value) {
        *self.report.lock().unwrap_or_else(|p| p.into_inner()) = report;
    }

    pub fn report(&self) -> Value {
        self.report
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set_handler(&self, handler: Arc<dyn ModelHandler>) {
        *self.handler.lock().unwrap_or_else(|p| p.into_inner()) = Some(handler);
    }

    /// Runs a command, refusing one stamped for another generation before any handler sees it.
    pub(crate) fn run(&self, generation: u64, model: u64, op: ModelOp) -> (ModelOutcome, Value) {
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
        match handler {
            Some(h) => h.run(model, op),
            None => (
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

    impl ModelHandler for Frees {
        fn run(&self, model: u64, _op: ModelOp) -> (ModelOutcome, Value) {
            (ModelOutcome::Done { bytes: model }, Value::Int(1))
        }
    }

    #[test]
    fn another_generation_is_refused_before_the_handler() {
        let s = ControlState::new(2);
        s.set_handler(Arc::new(Frees));
        s.publish(Value::Int(0));
        let (o, r) = s.run(1, 7, ModelOp::Unload);
        assert!(matches!(o, ModelOutcome::Refused { reason } if reason.contains("generation 1")));
        assert_eq!(r, Value::Int(0));
        assert_eq!(
            s.run(2, 7, ModelOp::Unload).0,
            ModelOutcome::Done { bytes: 7 }
        );
    }

    #[test]
    fn no_handler_means_no_models() {
        let s = ControlState::new(1);
        assert!(matches!(
            s.run(1, 7, ModelOp::Unload).0,
            ModelOutcome::Refused { .. }
        ));
    }
}

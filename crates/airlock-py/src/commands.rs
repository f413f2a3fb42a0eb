//! The host's commands to a worker as the Python code names them: an `op` string and a float
//! `arg`, the spelling of `Worker.model_command` on the host and of the model handler's
//! arguments in the worker. Both directions read this one table; on the wire the commands are
//! the typed [`ModelOp`] and [`Setting`] (ADR 0020).

use airlock_wire::{ModelOp, Setting};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// What a command asks of the worker: something of one model, or a worker-wide setting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Command {
    Model(ModelOp),
    Set(Setting),
}

const UNLOAD: &str = "unload";
const PARTIALLY_UNLOAD: &str = "partially_unload";
const PARTIALLY_LOAD: &str = "partially_load";
const PIN_CEILING: &str = "pin_ceiling";
const CACHE_HEADROOM: &str = "cache_headroom";

/// A byte count from Python's float: negative reads as 0.
fn bytes(arg: f64) -> u64 {
    arg.max(0.0) as u64
}

/// The command `op` with `arg` (bytes, or `partially_load`'s budget as upstream passes it).
pub(crate) fn parse(op: &str, arg: f64) -> PyResult<Command> {
    Ok(match op {
        UNLOAD => Command::Model(ModelOp::Unload),
        PARTIALLY_UNLOAD => Command::Model(ModelOp::PartiallyUnload { bytes: bytes(arg) }),
        PARTIALLY_LOAD => Command::Model(ModelOp::PartiallyLoad { extra: arg }),
        PIN_CEILING => Command::Set(Setting::PinCeiling { bytes: bytes(arg) }),
        CACHE_HEADROOM => Command::Set(Setting::CacheHeadroom { bytes: bytes(arg) }),
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown model command {other:?}"
            )));
        }
    })
}

/// `(op, arg)` as the worker's model handler receives `command`.
pub(crate) fn spell(command: Command) -> (&'static str, f64) {
    match command {
        Command::Model(ModelOp::Unload) => (UNLOAD, 0.0),
        Command::Model(ModelOp::PartiallyUnload { bytes }) => (PARTIALLY_UNLOAD, bytes as f64),
        Command::Model(ModelOp::PartiallyLoad { extra }) => (PARTIALLY_LOAD, extra),
        Command::Set(Setting::PinCeiling { bytes }) => (PIN_CEILING, bytes as f64),
        Command::Set(Setting::CacheHeadroom { bytes }) => (CACHE_HEADROOM, bytes as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_reads_back_as_it_was_spelled() {
        for (op, arg) in [
            (UNLOAD, 0.0),
            (PARTIALLY_UNLOAD, 4096.0),
            (PARTIALLY_LOAD, 1e32),
            (PARTIALLY_LOAD, -2048.0),
            (PIN_CEILING, 1024.0),
            (CACHE_HEADROOM, 0.0),
        ] {
            assert_eq!(spell(parse(op, arg).unwrap()), (op, arg));
        }
        assert_eq!(
            parse(PARTIALLY_UNLOAD, -5.0).unwrap(),
            Command::Model(ModelOp::PartiallyUnload { bytes: 0 })
        );
    }
}

//! The exception classes, and how core errors map onto them.

use airlock_supervisor::{LaneError, SpawnError as CoreSpawn, WorkerDied as CoreDied};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    comfy_airlock,
    AirlockError,
    PyException,
    "Base class of every comfy-airlock error."
);
create_exception!(
    comfy_airlock,
    WorkerDied,
    AirlockError,
    "The worker process died; the next call starts a new generation."
);
create_exception!(
    comfy_airlock,
    SpawnError,
    AirlockError,
    "The worker could not be started or did not complete the handshake."
);
create_exception!(
    comfy_airlock,
    ProtocolError,
    AirlockError,
    "The peer sent something the protocol forbids (a corrupt frame, a forged release...)."
);
create_exception!(
    comfy_airlock,
    HandshakeError,
    ProtocolError,
    "A connection was refused during the handshake (wrong token, version or peer)."
);
create_exception!(
    comfy_airlock,
    ValueTooLarge,
    AirlockError,
    "A value breaks a limit of what one call, reply or event may carry (items, nesting, bytes \
     in one frame); it was refused before anything was sent, and the worker is untouched."
);
create_exception!(
    comfy_airlock,
    RemoteError,
    AirlockError,
    "An exception raised in the worker whose class cannot be re-created in the host."
);
create_exception!(
    comfy_airlock,
    CallInterrupted,
    AirlockError,
    "A call was stopped because it was interrupted (ComfyUI's cancel or `Worker.interrupt`); \
     the message says whether the node stopped at its check, at SIGINT or was killed."
);
create_exception!(
    comfy_airlock,
    DeadlineExceeded,
    AirlockError,
    "A call ran past the pack's `call-deadline` and was stopped like an interrupted one."
);
create_exception!(
    comfy_airlock,
    EnvError,
    AirlockError,
    "A pack's environment could not be prepared; the message starts with the pack's name."
);
create_exception!(
    comfy_airlock,
    ConfigError,
    EnvError,
    "A pack's airlock.toml or comfy-env.toml is missing or invalid (names file, line and key)."
);
create_exception!(
    comfy_airlock,
    EnvMissing,
    EnvError,
    "A pack's environment is not built or out of date, and building was not asked for."
);

create_exception!(
    comfy_airlock,
    DeviceError,
    AirlockError,
    "A simulated GPU or NVML call failed (NVML that is missing reads as None, not as this)."
);
create_exception!(
    comfy_airlock,
    SimOutOfMemory,
    DeviceError,
    "A checked booking on a simulated GPU did not fit, as a CUDA allocation would not; \
     `.requested` and `.free` are bytes."
);

pub fn died(e: &CoreDied) -> PyErr {
    Python::attach(|py| {
        let err = WorkerDied::new_err(e.to_string());
        let v = err.value(py);
        let _ = v.setattr("worker", &e.name);
        let _ = v.setattr("pid", e.pid);
        let _ = v.setattr("generation", e.generation);
        let _ = v.setattr("status", e.status.to_string());
        let _ = v.setattr("stderr_tail", e.stderr_tail.clone());
        err
    })
}

pub fn spawn(name: &str, e: &CoreSpawn) -> PyErr {
    match e {
        CoreSpawn::Handshake(_) | CoreSpawn::ForeignPeer { .. } => {
            HandshakeError::new_err(format!("worker '{name}': {e}"))
        }
        _ => SpawnError::new_err(format!("worker '{name}' could not start: {e}")),
    }
}

pub fn lane(name: &str, e: &LaneError) -> PyErr {
    ProtocolError::new_err(format!("worker '{name}': {e}"))
}

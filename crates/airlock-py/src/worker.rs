//! The worker's end: connect to the host, receive calls, send replies.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use airlock_shm::PoolConfig;
use airlock_supervisor::{CallLane, ControlState, ModelHandler, SignalPage, WorkerIdentity};
use airlock_wire::{
    Message, ModelOp, ModelOutcome, RemoteException, Side, TOKEN_LEN, Token, Value,
};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::convert::{Encoder, decode};
use crate::errors::{HandshakeError, ProtocolError};
use crate::lane::Lane;

fn host_gone() {
    // The host is gone: nobody will read our results. Exit now, from whatever thread, without
    // running Python finalizers that might block on the dead host.
    // SAFETY: _exit is async-signal-safe and takes no locks.
    unsafe { libc_exit(0) }
}

unsafe extern "C" {
    #[link_name = "_exit"]
    fn libc_exit(code: i32) -> !;
}

/// Makes this worker non-dumpable: a sibling of the same user can no longer take its
/// descriptors (`pidfd_getfd`), `ptrace` it or read its `/proc` entries. Called first thing by
/// `python -m comfy_airlock.worker`, and again by :func:`connect`.
#[pyfunction]
pub fn forbid_same_user_access() -> PyResult<()> {
    airlock_supervisor::forbid_same_user_access()
        .map_err(|e| HandshakeError::new_err(format!("cannot make the worker non-dumpable: {e}")))
}

/// Connects to the host that spawned this process.
#[pyfunction]
#[pyo3(signature = (socket, token_hex, python, torch=None, numpy=None))]
pub fn connect(
    py: Python<'_>,
    socket: PathBuf,
    token_hex: &str,
    python: String,
    torch: Option<String>,
    numpy: Option<String>,
) -> PyResult<WorkerLink> {
    let token = parse_token(token_hex)?;
    let id = WorkerIdentity {
        python,
        torch,
        numpy,
    };
    let pool = PoolConfig {
        name: format!("airlock-worker-{}", std::process::id()),
        ..PoolConfig::default()
    };
    let (lane, control, name) = py
        .detach(|| airlock_supervisor::connect(&socket, token, &id, pool, host_gone))
        .map_err(|e| HandshakeError::new_err(format!("cannot connect to the host: {e}")))?;
    let lane_obj = Py::new(py, Lane::new(py, lane.clone(), Side::Worker))?;
    let signal = adopt_signal_page()?;
    Ok(WorkerLink {
        signal,
        lane,
        lane_obj,
        generation: control.generation(),
        control,
        name,
        current: AtomicU64::new(0),
        last_end: AtomicU64::new(0),
        started: std::time::Instant::now(),
    })
}

/// The interrupt page the host handed over on the descriptor named by `AIRLOCK_SIGNAL_FD`.
fn adopt_signal_page() -> PyResult<Option<SignalPage>> {
    let Ok(fd) = std::env::var("AIRLOCK_SIGNAL_FD") else {
        return Ok(None);
    };
    let bad = |why: String| HandshakeError::new_err(format!("interrupt page (fd {fd}): {why}"));
    let raw: i32 = fd.parse().map_err(|_| bad("not a descriptor".into()))?;
    SignalPage::adopt_inherited(raw)
        .map(Some)
        .map_err(|e| bad(e.to_string()))
}

fn parse_token(hex: &str) -> PyResult<Token> {
    let hex = hex.trim();
    let bad = || HandshakeError::new_err("malformed spawn token");
    if hex.len() != TOKEN_LEN * 2 {
        return Err(bad());
    }
    let mut t = [0u8; TOKEN_LEN];
    for (i, b) in t.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16)
            .map_err(|_| bad())?;
    }
    Ok(Token(t))
}

/// The worker's call lane.
#[pyclass(frozen, module = "comfy_airlock._native")]
pub struct WorkerLink {
    lane: Arc<CallLane>,
    lane_obj: Py<Lane>,
    #[pyo3(get)]
    generation: u64,
    control: Arc<ControlState>,
    #[pyo3(get)]
    name: String,
    /// The id of the call running now; 0 between calls (ids start at 1).
    current: AtomicU64,
    /// When the last call ended, in nanoseconds since `started` (for the idle trim).
    last_end: AtomicU64,
    started: std::time::Instant,
    /// Where the host raises an interrupt for the running call.
    signal: Option<SignalPage>,
}

#[pymethods]
impl WorkerLink {
    #[getter]
    fn lane<'py>(&self, py: Python<'py>) -> Bound<'py, Lane> {
        self.lane_obj.bind(py).clone()
    }

    /// True once if the host has asked the running call to stop (the flag is consumed). A
    /// load of one atomic: cheap enough for every interruption check a node makes.
    fn take_interrupt(&self) -> bool {
        self.signal
            .as_ref()
            .is_some_and(|s| s.take(self.current.load(Ordering::Acquire)))
    }

    /// The id of the call running now; 0 between calls.
    #[getter]
    fn call_id(&self) -> u64 {
        self.current.load(Ordering::Acquire)
    }

    /// Whether a call is running now.
    #[getter]
    fn in_call(&self) -> bool {
        self.current.load(Ordering::Acquire) != 0
    }

    /// Seconds since the last call ended (or since the connection, before the first); None
    /// while a call runs.
    fn idle_seconds(&self) -> Option<f64> {
        if self.current.load(Ordering::Acquire) != 0 {
            return None;
        }
        let end = std::time::Duration::from_nanos(self.last_end.load(Ordering::Acquire));
        Some(self.started.elapsed().saturating_sub(end).as_secs_f64())
    }

    /// Replaces the memory report that the control thread answers heartbeats with (plain
    /// values only: it is encoded now, and sent later without the GIL).
    fn publish(&self, py: Python<'_>, report: &Bound<'_, PyAny>) -> PyResult<()> {
        let value = encode_plain(self.lane_obj.bind(py), report)?;
        self.control.publish(value);
        Ok(())
    }

    /// Installs `handler(model, op, arg) -> (freed_or_loaded | None, refusal | None, report)`
    /// for model commands. It runs on the control thread, taking the GIL between the running
    /// node's bytecodes; `op` is "unload", "partially_unload" (arg: bytes) or
    /// "partially_load" (arg: the budget as upstream passes it), or "pin_ceiling" /
    /// "cache_headroom" (arg: bytes; for the worker, not a model: worker/ram.py).
    fn set_model_handler(&self, py: Python<'_>, handler: Py<PyAny>) {
        self.control.set_handler(Arc::new(PyModelHandler {
            handler,
            lane: self.lane_obj.clone_ref(py),
        }));
    }

    /// Sends an event (progress, a preview, a UI message) to the host for the call running
    /// now. It does not wait: the host handles it while it waits for the reply.
    fn emit(&self, py: Python<'_>, topic: String, payload: &Bound<'_, PyAny>) -> PyResult<()> {
        let id = self.current.load(Ordering::Acquire);
        if id == 0 {
            return Err(crate::errors::AirlockError::new_err(format!(
                "event '{topic}' sent outside a call: the host only listens while a call runs"
            )));
        }
        let lane = self.lane_obj.bind(py);
        let mut enc = Encoder::new(lane);
        let payload = match enc.encode(payload) {
            Ok(v) => v,
            Err(e) => {
                enc.abandon();
                return Err(e);
            }
        };
        let msg = Message::Event { id, topic, payload };
        let l = self.lane.clone();
        py.detach(move || l.send(&msg))
            .map_err(|e| ProtocolError::new_err(format!("call lane: {e}")))
    }

    /// Asks the host `topic` (which must end in `?`) for the call running now and waits for
    /// its answer on the call lane (the node's own thread reads it: the serve loop is inside
    /// the call). A `{"error": message}` answer is raised as `AirlockError`.
    fn ask<'py>(
        &self,
        py: Python<'py>,
        topic: String,
        payload: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if !topic.ends_with('?') {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "a question's topic ends in '?': {topic:?}"
            )));
        }
        let id = self.current.load(Ordering::Acquire);
        self.emit(py, topic.clone(), payload)?;
        let lane = self.lane_obj.bind(py);
        let l = self.lane.clone();
        let got = py
            .detach(move || l.recv())
            .map_err(|e| ProtocolError::new_err(format!("call lane: {e}")))?;
        match got {
            Some(Message::Event {
                id: aid,
                topic: t,
                payload,
            }) if aid == id && t == topic => {
                let answer = decode(py, lane, payload)?;
                if let Ok(d) = answer.cast::<pyo3::types::PyDict>()
                    && d.len() == 1
                    && let Some(err) = d.get_item("error")?
                {
                    return Err(crate::errors::AirlockError::new_err(err.str()?.unbind()));
                }
                Ok(answer)
            }
            Some(other) => Err(ProtocolError::new_err(format!(
                "expected the host's answer to '{topic}', got {}",
                other.kind()
            ))),
            None => Err(ProtocolError::new_err("the host closed the call lane")),
        }
    }

    /// Runs calls until the host says stop or goes away: the worker's main loop, kept out of
    /// Python bytecode. `resolve(target)` returns the callable for `"module:qualname"` (cached
    /// here); `describe(exc, tb)` returns `(module, qualname, message, args, traceback)`.
    fn serve(
        &self,
        py: Python<'_>,
        resolve: &Bound<'_, PyAny>,
        describe: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let lane = self.lane_obj.bind(py);
        let mut targets: HashMap<String, Py<PyAny>> = HashMap::new();
        loop {
            let l = self.lane.clone();
            let msg = py
                .detach(move || l.recv())
                .map_err(|e| ProtocolError::new_err(format!("call lane: {e}")))?;
            let (id, target, args, kwargs) = match msg {
                Some(Message::Shutdown) => return Ok(()),
                None => {
                    // The host is gone: so is anything this worker forked.
                    airlock_supervisor::kill_forked_children();
                    return Ok(());
                }
                Some(Message::Call {
                    id,
                    target,
                    args,
                    kwargs,
                }) => (id, target, args, kwargs),
                Some(_) => {
                    return Err(ProtocolError::new_err(
                        "unexpected message on the call lane",
                    ));
                }
            };
            self.current.store(id, Ordering::Release);
            // Everything that references the host's regions (arguments, the result) lives in
            // this closure and is dropped before the reply is sent: their releases go first.
            let outcome = (|| -> PyResult<Value> {
                let args = decode(py, lane, args)?;
                let kwargs = decode(py, lane, kwargs)?;
                let f = match targets.get(&target) {
                    Some(f) => f.bind(py).clone(),
                    None => {
                        let f = resolve.call1((&target,))?;
                        targets.insert(target.clone(), f.clone().unbind());
                        f
                    }
                };
                let args = args.cast_into::<PyTuple>()?;
                let kwargs = kwargs.cast_into::<pyo3::types::PyDict>()?;
                let result = f.call(args, Some(&kwargs))?;
                let mut enc = Encoder::new(lane);
                match enc.encode(&result) {
                    Ok(v) => Ok(v),
                    Err(e) => {
                        enc.abandon();
                        Err(e)
                    }
                }
            })();
            let now = self.started.elapsed().as_nanos() as u64;
            self.last_end.store(now, Ordering::Release);
            self.current.store(0, Ordering::Release);
            let msg = match outcome {
                Ok(value) => Message::Reply { id, value },
                Err(err) => {
                    let info = describe.call1((err.value(py), err.traceback(py)))?;
                    let (module, qualname, message, args, traceback): (
                        String,
                        String,
                        String,
                        Bound<'_, PyTuple>,
                        String,
                    ) = info.extract()?;
                    Message::Error {
                        id,
                        error: RemoteException {
                            module,
                            qualname,
                            message,
                            args: plain_args(&args),
                            traceback,
                        },
                    }
                }
            };
            let l = self.lane.clone();
            py.detach(move || l.send(&msg))
                .map_err(|e| ProtocolError::new_err(format!("call lane: {e}")))?;
        }
    }
}

/// Exception args that are plain scalars travel; anything else is left out (the message
/// carries `str(exc)` anyway).
fn plain_args(args: &Bound<'_, PyTuple>) -> Value {
    let mut out = Vec::new();
    for a in args.iter() {
        let v = if a.is_none() {
            Value::None
        } else if let Ok(b) = a.cast_exact::<pyo3::types::PyBool>() {
            Value::Bool(b.is_true())
        } else if let Some(i) = a
            .cast_exact::<pyo3::types::PyInt>()
            .ok()
            .and_then(|i| i.extract::<i64>().ok())
        {
            Value::Int(i)
        } else if let Ok(f) = a.cast_exact::<pyo3::types::PyFloat>() {
            Value::Float(f.value())
        } else if let Ok(s) = a.cast_exact::<pyo3::types::PyString>() {
            match s.to_str() {
                Ok(s) => Value::Str(s.to_owned()),
                Err(_) => return Value::Tuple(Vec::new()),
            }
        } else {
            return Value::Tuple(Vec::new());
        };
        out.push(v);
    }
    Value::Tuple(out)
}

fn encode_plain(lane: &Bound<'_, Lane>, obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    let mut enc = Encoder::new(lane);
    match enc.encode(obj) {
        Ok(v) => Ok(v),
        Err(e) => {
            enc.abandon();
            Err(e)
        }
    }
}

/// Model commands answered by the worker runtime's Python handler.
struct PyModelHandler {
    handler: Py<PyAny>,
    lane: Py<Lane>,
}

impl ModelHandler for PyModelHandler {
    fn run(&self, model: u64, op: ModelOp) -> (ModelOutcome, Value) {
        Python::attach(|py| {
            let (name, arg): (&str, f64) = match op {
                ModelOp::Unload => ("unload", 0.0),
                ModelOp::PartiallyUnload { bytes } => ("partially_unload", bytes as f64),
                ModelOp::PartiallyLoad { extra } => ("partially_load", extra),
                ModelOp::PinCeiling { bytes } => ("pin_ceiling", bytes as f64),
                ModelOp::CacheHeadroom { bytes } => ("cache_headroom", bytes as f64),
            };
            let refused = |reason: String| (ModelOutcome::Refused { reason }, Value::None);
            let out = match self.handler.bind(py).call1((model, name, arg)) {
                Ok(out) => out,
                Err(e) => return refused(format!("the model handler raised: {e}")),
            };
            let parsed: PyResult<(Option<u64>, Option<String>, Bound<'_, PyAny>)> = out.extract();
            let (bytes, reason, report) = match parsed {
                Ok(t) => t,
                Err(e) => return refused(format!("the model handler answered badly: {e}")),
            };
            let report = encode_plain(self.lane.bind(py), &report).unwrap_or(Value::None);
            let outcome = match (bytes, reason) {
                (_, Some(reason)) => ModelOutcome::Refused { reason },
                (Some(bytes), None) => ModelOutcome::Done { bytes },
                (None, None) => ModelOutcome::Done { bytes: 0 },
            };
            (outcome, report)
        })
    }
}

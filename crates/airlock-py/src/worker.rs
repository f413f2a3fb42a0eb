//! The worker's end: connect to the host, receive calls, send replies.

use std::path::PathBuf;
use std::sync::Arc;

use airlock_shm::PoolConfig;
use airlock_supervisor::{
    AskError, CallLane, CallState, CommandResult, ControlState, ModelHandler, SignalPage,
    WorkerIdentity,
};
use airlock_wire::{Message, ModelOp, ModelOutcome, Setting, Side, TOKEN_LEN, Token, Value};
use pyo3::prelude::*;

use crate::commands::{self, Command};
use crate::convert::{Encoder, decode};
use crate::errors::{HandshakeError, ProtocolError};
use crate::lane::Lane;
use crate::runner::PyRunner;
use crate::shapes;

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
    let connected = crate::exit_gate::detach(py, || {
        airlock_supervisor::connect(&socket, token, &id, pool, host_gone)
    })
    .map_err(|e| HandshakeError::new_err(format!("cannot connect to the host: {e}")))?;
    let airlock_supervisor::Connected {
        call: lane,
        route,
        events,
        control,
        name,
    } = connected;
    let signal = adopt_signal_page()?.map(Arc::new);
    if let Some(page) = &signal {
        lane.attach_page(page.clone());
    }
    // The route lane's link: its own calls, never interrupted (the host never raises the
    // page for them), no route lane of its own.
    let route = WorkerLink::new(py, route, control.clone(), name.clone(), None, None)?;
    let mut link = WorkerLink::new(py, lane, control, name, signal, Some(Py::new(py, route)?))?;
    let events_obj = Py::new(py, Lane::new(py, events.clone(), Side::Worker))?;
    link.events = Some((events, events_obj));
    Ok(link)
}

/// The interrupt page the host handed over (see [`SignalPage::from_env`]).
fn adopt_signal_page() -> PyResult<Option<SignalPage>> {
    SignalPage::from_env().map_err(|e| HandshakeError::new_err(e.to_string()))
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

/// One of the worker's call lanes: the node calls' (with its route lane's link as `route`)
/// or the HTTP routes' (ADR 0055).
#[pyclass(frozen, module = "comfy_airlock._native")]
pub struct WorkerLink {
    lane: Arc<CallLane>,
    lane_obj: Py<Lane>,
    #[pyo3(get)]
    generation: u64,
    control: Arc<ControlState>,
    #[pyo3(get)]
    name: String,
    /// The call running now and when the last one ended.
    calls: CallState,
    /// Where the host raises an interrupt for the running call, and each side notes its
    /// receipts and sends (ADR 0046).
    signal: Option<Arc<SignalPage>>,
    /// The route lane's link (None on that link itself).
    #[pyo3(get)]
    route: Option<Py<WorkerLink>>,
    /// The events lane (the call lane's link only): UI messages sent while no call runs.
    events: Option<(Arc<CallLane>, Py<Lane>)>,
}

impl WorkerLink {
    fn new(
        py: Python<'_>,
        lane: Arc<CallLane>,
        control: Arc<ControlState>,
        name: String,
        signal: Option<Arc<SignalPage>>,
        route: Option<Py<WorkerLink>>,
    ) -> PyResult<WorkerLink> {
        Ok(WorkerLink {
            lane_obj: Py::new(py, Lane::new(py, lane.clone(), Side::Worker))?,
            lane,
            generation: control.generation(),
            control,
            name,
            calls: CallState::new(),
            signal,
            route,
            events: None,
        })
    }
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
            .is_some_and(|s| s.take(self.calls.current()))
    }

    /// The id of the call running now; 0 between calls.
    #[getter]
    fn call_id(&self) -> u64 {
        self.calls.current()
    }

    /// Whether a call is running now.
    #[getter]
    fn in_call(&self) -> bool {
        self.calls.current() != 0
    }

    /// Seconds since the last call ended (or since the connection, before the first); None
    /// while a call runs.
    fn idle_seconds(&self) -> Option<f64> {
        self.calls.idle_seconds()
    }

    /// Replaces the memory report that the control thread answers heartbeats with (checked
    /// and converted now, and sent later without the GIL).
    fn publish(&self, report: &Bound<'_, PyAny>) -> PyResult<()> {
        self.control.publish(shapes::report(report)?);
        Ok(())
    }

    /// Installs `handler(model, op, arg) -> (freed_or_loaded | None, refusal | None, report)`
    /// for model commands. It runs on the control thread, taking the GIL between the running
    /// node's bytecodes; `op` is "unload", "partially_unload" (arg: bytes) or
    /// "partially_load" (arg: the budget as upstream passes it), or "pin_ceiling" /
    /// "cache_headroom" (arg: bytes; for the worker, not a model: worker/ram.py).
    fn set_model_handler(&self, handler: Py<PyAny>) {
        self.control
            .set_handler(Arc::new(PyModelHandler { handler }));
    }

    /// Sends an event (progress, a preview, a UI message) to the host for the call running
    /// now. It does not wait: the host handles it while it waits for the reply. The memory
    /// topics ("loaded", "telemetry") travel as typed notices: their payload must have the
    /// protocol's fields.
    fn emit(&self, py: Python<'_>, topic: String, payload: &Bound<'_, PyAny>) -> PyResult<()> {
        let id = self.call_in_progress(&topic)?;
        let msg = match shapes::notice(&topic, payload) {
            Some(notice) => Message::Notice {
                id,
                notice: notice?,
            },
            None => Message::Event {
                id,
                topic,
                payload: encode_plain(self.lane_obj.bind(py), payload)?,
            },
        };
        let l = self.lane.clone();
        crate::exit_gate::detach(py, move || l.send(&msg))
            .map_err(|e| ProtocolError::new_err(format!("call lane: {e}")))
    }

    /// Sends a UI message (`topic` one of "send_sync", "progress_text") on the events lane,
    /// for a host thread that reads it while no call runs (ADR 0056). It does not wait.
    fn post(&self, py: Python<'_>, topic: String, payload: &Bound<'_, PyAny>) -> PyResult<()> {
        let Some((lane, lane_obj)) = &self.events else {
            return Err(crate::errors::AirlockError::new_err(
                "this link has no events lane (the route lane's link)",
            ));
        };
        if !airlock_supervisor::UI_TOPICS.contains(&topic.as_str()) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "only UI messages go on the events lane, not {topic:?}"
            )));
        }
        let msg = Message::Event {
            id: 0,
            topic,
            payload: encode_plain(lane_obj.bind(py), payload)?,
        };
        let l = lane.clone();
        crate::exit_gate::detach(py, move || l.send(&msg))
            .map_err(|e| ProtocolError::new_err(format!("events lane: {e}")))
    }

    /// Asks the host `topic` (which must end in `?`) for the call running now and waits for
    /// its answer on the call lane (the node's own thread reads it: the serve loop is inside
    /// the call). A `{"error": message}` answer is raised as `AirlockError`. The memory
    /// questions ("admit?", "oom?") travel typed: their payload must have the protocol's
    /// fields, and the answer is the admission's fields the worker uses.
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
        let id = self.calls.current();
        let l = self.lane.clone();
        if let Some(question) = shapes::question(&topic, payload) {
            self.call_in_progress(&topic)?;
            let question = question?;
            let answer =
                crate::exit_gate::detach(py, move || airlock_supervisor::ask(&l, id, question))
                    .map_err(|e| ask_failed(&topic, e))?;
            return shapes::answer_to_py(py, &answer);
        }
        self.emit(py, topic.clone(), payload)?;
        let got = crate::exit_gate::detach(py, || airlock_supervisor::await_answer(&l, id, &topic))
            .map_err(|e| ask_failed(&topic, e))?;
        let answer = decode(py, self.lane_obj.bind(py), got)?;
        if let Ok(d) = answer.cast::<pyo3::types::PyDict>()
            && d.len() == 1
            && let Some(err) = d.get_item("error")?
        {
            return Err(crate::errors::AirlockError::new_err(err.str()?.unbind()));
        }
        Ok(answer)
    }

    /// Lets the nodes' outputs be born in the call lane's pool (ADR 0044): blocks of at least
    /// `min_bytes`, up to `budget` live bytes. False if `libairlock_born.so` is not preloaded.
    fn enable_births(&self, min_bytes: u64, budget: u64) -> bool {
        crate::born::enable(self.lane.clone(), min_bytes, budget)
    }

    /// Runs calls until the host says stop or goes away: the worker's main loop, run by the
    /// supervisor (`airlock_supervisor::serve`). `resolve(target)` returns the callable for
    /// `"module:qualname"` (once per target); `describe(exc, tb)` returns `(module, qualname,
    /// message, args, traceback)`.
    fn serve(
        &self,
        py: Python<'_>,
        resolve: &Bound<'_, PyAny>,
        describe: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let mut runner = PyRunner::new(py, self.lane_obj.bind(py), resolve, describe);
        airlock_supervisor::serve(&self.lane, &self.calls, &mut runner).map_err(|e| match e {
            airlock_supervisor::ServeError::Lane(e) => {
                ProtocolError::new_err(format!("call lane: {e}"))
            }
            airlock_supervisor::ServeError::Unexpected(_) => {
                ProtocolError::new_err("unexpected message on the call lane")
            }
            airlock_supervisor::ServeError::Runner(e) => e,
        })
    }
}

impl WorkerLink {
    /// The id of the call running now; an event or question outside a call is an error.
    fn call_in_progress(&self, topic: &str) -> PyResult<u64> {
        match self.calls.current() {
            0 => Err(crate::errors::AirlockError::new_err(format!(
                "event '{topic}' sent outside a call: the host only listens while a call runs"
            ))),
            id => Ok(id),
        }
    }
}

/// The error of a question that got no answer.
fn ask_failed(topic: &str, e: AskError) -> PyErr {
    match e {
        AskError::Lane(e) => ProtocolError::new_err(format!("call lane: {e}")),
        AskError::Closed => ProtocolError::new_err("the host closed the call lane"),
        AskError::Unexpected(kind) => ProtocolError::new_err(format!(
            "expected the host's answer to '{topic}', got {kind}"
        )),
    }
}

/// A value encoded for the host; on failure nothing it leased stays allocated.
pub(crate) fn encode_plain(lane: &Bound<'_, Lane>, obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    let mut enc = Encoder::new(lane);
    match enc.encode(obj) {
        Ok(v) => Ok(v),
        Err(e) => {
            enc.abandon();
            Err(e)
        }
    }
}

/// Commands answered by the worker runtime's Python handler, in the handler's spelling
/// (`crate::commands`).
struct PyModelHandler {
    handler: Py<PyAny>,
}

impl PyModelHandler {
    fn call(&self, model: u64, command: Command) -> CommandResult {
        let refused = |reason: String| (ModelOutcome::Refused { reason }, None);
        // The control thread is ours: past the interpreter's exit it must not attach.
        crate::exit_gate::with_python(|py| {
            let (name, arg) = commands::spell(command);
            let out = match self.handler.bind(py).call1((model, name, arg)) {
                Ok(out) => out,
                Err(e) => return refused(format!("the model handler raised: {e}")),
            };
            let parsed: PyResult<(Option<u64>, Option<String>, Bound<'_, PyAny>)> = out.extract();
            let (bytes, reason, report) = match parsed {
                Ok(t) => t,
                Err(e) => return refused(format!("the model handler answered badly: {e}")),
            };
            // A report that is not one (None, or fields the protocol lacks) is left out, as an
            // unencodable one was before.
            let report = shapes::report(&report).ok();
            let outcome = match (bytes, reason) {
                (_, Some(reason)) => ModelOutcome::Refused { reason },
                (Some(bytes), None) => ModelOutcome::Done { bytes },
                (None, None) => ModelOutcome::Done { bytes: 0 },
            };
            (outcome, report)
        })
        .unwrap_or_else(|| refused("the worker's Python is exiting".to_owned()))
    }
}

impl ModelHandler for PyModelHandler {
    fn run(&self, model: u64, op: ModelOp) -> CommandResult {
        self.call(model, Command::Model(op))
    }

    fn set(&self, setting: Setting) -> CommandResult {
        // Not about a model: the handler's model argument is 0, as it always was.
        self.call(0, Command::Set(setting))
    }
}

/// Lets this worker's numpy arrays be born too (ADR 0045), given numpy's `_ARRAY_API`
/// capsule: "installed" (now or already), "foreign" (a handler of the pack's own is set, left
/// alone), "unsupported" (numpy before 1.22) or "off" (births are off).
#[pyfunction]
pub fn born_numpy(py: Python<'_>, api: &Bound<'_, PyAny>) -> PyResult<&'static str> {
    use crate::born_numpy::Outcome;
    let Some(ours) = crate::born::numpy_handler() else {
        return Ok("off");
    };
    // SAFETY: `ours` is the preload library's `airlock_born_numpy`.
    let outcome = unsafe { crate::born_numpy::install(py, api, ours) }?;
    Ok(match outcome {
        Outcome::Installed => "installed",
        Outcome::Foreign => "foreign",
        Outcome::Unsupported => "unsupported",
    })
}

/// The births of this worker so far (ADR 0044), or None when they are off: `births`, `sent`
/// (sent as a reference), `refused` (past the budget or refused by the pool), `live_blocks`,
/// `live_bytes`.
#[pyfunction]
pub fn born_stats(py: Python<'_>) -> PyResult<Option<Bound<'_, pyo3::types::PyDict>>> {
    let Some((s, live_blocks)) = crate::born::stats() else {
        return Ok(None);
    };
    let d = pyo3::types::PyDict::new(py);
    d.set_item("births", s.births)?;
    d.set_item("sent", s.sent)?;
    d.set_item("refused", s.refused)?;
    d.set_item("live_blocks", live_blocks)?;
    d.set_item("live_bytes", s.live_bytes)?;
    Ok(Some(d))
}

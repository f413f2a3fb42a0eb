//! The host's handle on one worker: calls, lazy respawn, shutdown.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use airlock_shm::PoolConfig;
use airlock_supervisor::{LaneError, OutputSink, WorkerProcess, WorkerSpec};
use airlock_wire::{Message, ModelOp, ModelOutcome, RemoteException, Side, Value};
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyDict, PyTuple};

use crate::convert::{Encoder, decode};
use crate::errors::{self, AirlockError};
use crate::hooks::hooks;
use crate::lane::Lane;
use crate::sink::PyLogSink;

struct Running {
    process: Arc<WorkerProcess>,
    lane: Py<Lane>,
}

struct Slot {
    running: Option<Running>,
    generation: u64,
    closed: bool,
}

/// A worker process of the host, respawned lazily after it dies.
///
/// Calls are serialized (one exchange at a time per worker) by `calls`, held for a whole call;
/// `slot` is held only briefly, so `ping`, `kill` and `close` reach a worker that is busy.
#[pyclass(frozen, module = "comfy_airlock._native")]
pub struct Worker {
    spec: WorkerSpec,
    sink: Arc<dyn OutputSink>,
    slot: Mutex<Slot>,
    calls: Mutex<()>,
    next_id: AtomicU64,
    /// `on_event(topic, payload)` for [`Message::Event`]s of a running call.
    on_event: Option<Py<PyAny>>,
}

/// Locks without deadlocking against a thread that holds the lock and waits for the GIL.
fn slot_lock<'a, T>(py: Python<'_>, m: &'a Mutex<T>) -> MutexGuard<'a, T> {
    m.lock_py_attached(py).unwrap_or_else(|p| p.into_inner())
}

impl Worker {
    /// The live process and its lane, starting a new generation if there is none.
    fn running<'py>(&self, py: Python<'py>) -> PyResult<(Arc<WorkerProcess>, Bound<'py, Lane>)> {
        let mut slot = slot_lock(py, &self.slot);
        if slot.closed {
            return Err(AirlockError::new_err(format!(
                "worker '{}' is closed",
                self.spec.name
            )));
        }
        if let Some(r) = &slot.running
            && !r.process.is_alive()
        {
            slot.running = None;
        }
        if slot.running.is_none() {
            let generation = slot.generation + 1;
            let process = py
                .detach(|| WorkerProcess::spawn(&self.spec, generation, self.sink.clone()))
                .map_err(|e| errors::spawn(&self.spec.name, &e))?;
            slot.generation = generation;
            let lane = Py::new(py, Lane::new(py, process.call_lane().clone(), Side::Host))?;
            slot.running = Some(Running {
                process: Arc::new(process),
                lane,
            });
        }
        let r = slot.running.as_ref().expect("just ensured");
        Ok((r.process.clone(), r.lane.bind(py).clone()))
    }

    /// Turns a broken lane into the right exception, and forgets the process so that the next
    /// call starts a new generation.
    fn fail(
        &self,
        py: Python<'_>,
        process: &Arc<WorkerProcess>,
        target: &str,
        e: LaneError,
    ) -> PyErr {
        {
            let mut slot = slot_lock(py, &self.slot);
            if slot
                .running
                .as_ref()
                .is_some_and(|r| Arc::ptr_eq(&r.process, process))
            {
                slot.running = None;
            }
        }
        let exited = py.detach(|| process.wait_exit(Duration::from_millis(100)));
        if exited.is_some() {
            let during = format!("a call to '{target}'");
            return errors::died(&py.detach(|| process.died(&during)));
        }
        // Alive but speaking garbage: it cannot be trusted with another call.
        process.kill();
        errors::lane(&self.spec.name, &e)
    }
}

#[pymethods]
impl Worker {
    /// Starts the worker. `env` is its whole environment as `(name, value)` pairs.
    #[new]
    #[pyo3(signature = (name, python, args, env, cwd=None, connect_timeout=60.0, on_event=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        name: String,
        python: PathBuf,
        args: Vec<OsString>,
        env: Vec<(OsString, OsString)>,
        cwd: Option<PathBuf>,
        connect_timeout: f64,
        on_event: Option<Py<PyAny>>,
    ) -> PyResult<Worker> {
        let pool = PoolConfig {
            name: format!("airlock-{name}"),
            ..PoolConfig::default()
        };
        let w = Worker {
            spec: WorkerSpec {
                name,
                python,
                args,
                env,
                cwd,
                connect_timeout: Duration::from_secs_f64(connect_timeout),
                pool,
            },
            sink: Arc::new(PyLogSink),
            slot: Mutex::new(Slot {
                running: None,
                generation: 0,
                closed: false,
            }),
            calls: Mutex::new(()),
            next_id: AtomicU64::new(1),
            on_event,
        };
        w.running(py)?;
        Ok(w)
    }

    /// Runs `target` (`"module:qualname"`) in the worker and returns its result.
    #[pyo3(signature = (target, args, kwargs=None))]
    fn call<'py>(
        &self,
        py: Python<'py>,
        target: &str,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _serial = slot_lock(py, &self.calls);
        let (process, lane) = self.running(py)?;
        let mut enc = Encoder::new(&lane);
        let encoded = enc.encode(args.as_any()).and_then(|a| {
            let k = match kwargs {
                Some(k) => enc.encode(k.as_any())?,
                None => Value::Dict(Vec::new()),
            };
            Ok((a, k))
        });
        let (a, k) = match encoded {
            Ok(v) => v,
            Err(e) => {
                enc.abandon();
                return Err(e);
            }
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let msg = Message::Call {
            id,
            target: target.to_owned(),
            args: a,
            kwargs: k,
        };
        let call_lane = process.call_lane().clone();
        if let Err(e) = py.detach(|| call_lane.send(&msg)) {
            return Err(self.fail(py, &process, target, e));
        }
        // The first exception raised by an event handler (e.g. ComfyUI's progress hook on an
        // interrupt) is raised once the reply is in: the lane stays in step either way.
        let mut deferred: Option<PyErr> = None;
        let reply = loop {
            // Bookkeeping frames (releases, segments) are absorbed by the lane; what comes
            // out is the answer or an event, and only one call is in flight.
            let got = py.detach(|| call_lane.recv());
            match got {
                Ok(Some(Message::Event {
                    id: eid,
                    topic,
                    payload,
                })) => {
                    if eid != id {
                        continue; // a straggler of an earlier call: nobody is listening
                    }
                    let handled = decode(py, &lane, payload).and_then(|p| match &self.on_event {
                        Some(h) => h.bind(py).call1((topic, p)).map(drop),
                        None => Ok(()),
                    });
                    if let Err(e) = handled
                        && deferred.is_none()
                    {
                        deferred = Some(e);
                    }
                }
                Ok(Some(m @ (Message::Reply { .. } | Message::Error { .. }))) => break m,
                Ok(Some(other)) => {
                    let e = LaneError::Protocol(format!(
                        "unexpected {} on the call lane",
                        other.kind()
                    ));
                    return Err(self.fail(py, &process, target, e));
                }
                Ok(None) => return Err(self.fail(py, &process, target, LaneError::Closed)),
                Err(e) => return Err(self.fail(py, &process, target, e)),
            }
        };
        if let Some(e) = deferred {
            if let Message::Reply { value, .. } = reply {
                drop(decode(py, &lane, value)); // its regions are released
            }
            return Err(e);
        }
        match reply {
            Message::Reply { id: rid, value } if rid == id => decode(py, &lane, value),
            Message::Error { id: rid, error } if rid == id => {
                Err(remote_error(py, &lane, &self.spec.name, error))
            }
            _ => Err(self.fail(
                py,
                &process,
                target,
                LaneError::Protocol("reply for another call".into()),
            )),
        }
    }

    /// Pid of the current process (a new one after a respawn).
    #[getter]
    fn pid(&self, py: Python<'_>) -> Option<i32> {
        let slot = slot_lock(py, &self.slot);
        slot.running.as_ref().map(|r| r.process.pid())
    }

    /// Bumped on every spawn.
    #[getter]
    fn generation(&self, py: Python<'_>) -> u64 {
        slot_lock(py, &self.slot).generation
    }

    #[getter]
    fn name(&self) -> &str {
        &self.spec.name
    }

    /// Whether a process is running now (it is started again on the next call if not).
    #[getter]
    fn alive(&self, py: Python<'_>) -> bool {
        let slot = slot_lock(py, &self.slot);
        slot.running.as_ref().is_some_and(|r| r.process.is_alive())
    }

    /// What the worker reported at its handshake.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let slot = slot_lock(py, &self.slot);
        let Some(r) = &slot.running else {
            return Ok(None);
        };
        let h = r.process.hello();
        let d = PyDict::new(py);
        d.set_item("pid", r.process.pid())?;
        d.set_item("generation", r.process.generation())?;
        d.set_item("python", &h.python)?;
        d.set_item("torch", &h.torch)?;
        d.set_item("numpy", &h.numpy)?;
        Ok(Some(d))
    }

    /// The current call lane (for the codec and for leak checks).
    #[getter]
    fn lane<'py>(&self, py: Python<'py>) -> Option<Bound<'py, Lane>> {
        let slot = slot_lock(py, &self.slot);
        slot.running.as_ref().map(|r| r.lane.bind(py).clone())
    }

    /// Control-lane round trip in seconds; answered even while a call runs.
    #[pyo3(signature = (timeout=5.0))]
    fn ping(&self, py: Python<'_>, timeout: f64) -> PyResult<f64> {
        let process = {
            let slot = slot_lock(py, &self.slot);
            slot.running.as_ref().map(|r| r.process.clone())
        };
        let Some(p) = process else {
            return Err(AirlockError::new_err("worker is not running"));
        };
        py.detach(|| p.ping(Duration::from_secs_f64(timeout)))
            .map(|d| d.as_secs_f64())
            .map_err(|e| errors::lane(&self.spec.name, &e))
    }

    /// The worker's latest memory report (decoded), from its control thread; None when no
    /// process is running.
    #[pyo3(signature = (timeout=5.0))]
    fn heartbeat<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Option<Bound<'py, PyAny>>> {
        let running = {
            let slot = slot_lock(py, &self.slot);
            slot.running
                .as_ref()
                .map(|r| (r.process.clone(), r.lane.clone_ref(py)))
        };
        let Some((p, lane)) = running else {
            return Ok(None);
        };
        let report = py
            .detach(|| p.heartbeat(Duration::from_secs_f64(timeout)))
            .map_err(|e| errors::lane(&self.spec.name, &e))?;
        decode(py, lane.bind(py), report).map(Some)
    }

    /// Runs a model command in the worker of `generation`: `op` is "unload",
    /// "partially_unload" (`arg` bytes) or "partially_load" (`arg` the budget). Returns
    /// `(bytes, refusal, report)`: `refusal` is a reason when nothing was done. A command for
    /// a generation that is not running is refused here and never sent.
    #[pyo3(signature = (generation, model, op, arg=0.0, timeout=30.0))]
    fn model_command<'py>(
        &self,
        py: Python<'py>,
        generation: u64,
        model: u64,
        op: &str,
        arg: f64,
        timeout: f64,
    ) -> PyResult<(u64, Option<String>, Bound<'py, PyAny>)> {
        let op = match op {
            "unload" => ModelOp::Unload,
            "partially_unload" => ModelOp::PartiallyUnload {
                bytes: arg.max(0.0) as u64,
            },
            "partially_load" => ModelOp::PartiallyLoad { extra: arg },
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "unknown model command {other:?}"
                )));
            }
        };
        let running = {
            let slot = slot_lock(py, &self.slot);
            slot.running
                .as_ref()
                .filter(|r| r.process.generation() == generation && r.process.is_alive())
                .map(|r| (r.process.clone(), r.lane.clone_ref(py)))
        };
        let Some((p, lane)) = running else {
            let reason = format!(
                "generation {generation} of worker '{}' is gone",
                self.spec.name
            );
            return Ok((0, Some(reason), py.None().into_bound(py)));
        };
        let (outcome, report) = py
            .detach(|| p.model_command(model, op, Duration::from_secs_f64(timeout)))
            .map_err(|e| errors::lane(&self.spec.name, &e))?;
        let report = decode(py, lane.bind(py), report)?;
        Ok(match outcome {
            ModelOutcome::Done { bytes } => (bytes, None, report),
            ModelOutcome::Refused { reason } => (0, Some(reason), report),
        })
    }

    /// SIGKILL the current process (for tests of crash handling).
    fn kill(&self, py: Python<'_>) {
        let slot = slot_lock(py, &self.slot);
        if let Some(r) = &slot.running {
            r.process.kill();
        }
    }

    /// Asks the worker to exit, waits up to `grace` seconds, then kills it. Idempotent.
    #[pyo3(signature = (grace=5.0))]
    fn close(&self, py: Python<'_>, grace: f64) -> Option<String> {
        let running = {
            let mut slot = slot_lock(py, &self.slot);
            slot.closed = true;
            slot.running.take()
        };
        let r = running?;
        let status = py.detach(|| r.process.shutdown(Duration::from_secs_f64(grace)));
        Some(status.to_string())
    }
}

fn remote_error<'py>(
    py: Python<'py>,
    lane: &Bound<'py, Lane>,
    worker: &str,
    e: RemoteException,
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let h = hooks(py)?;
        let args = decode(py, lane, e.args)?
            .cast_into::<PyTuple>()
            .unwrap_or_else(|_| PyTuple::empty(py));
        let exc = h.make_exception.bind(py).call1((
            worker,
            &e.module,
            &e.qualname,
            &e.message,
            args,
            &e.traceback,
        ))?;
        Ok(PyErr::from_value(exc))
    };
    build().unwrap_or_else(|err| err)
}

//! The host's handle on one worker: calls, lazy respawn, shutdown.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use airlock_shm::PoolConfig;
use airlock_supervisor::{
    InterruptPolicy, LaneError, Liveness, OutputSink, WorkerProcess, WorkerSpec,
};
use airlock_wire::{Message, ModelOp, ModelOutcome, RemoteException, Side, Value};
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyDict, PyTuple};

use crate::call_watch::{CallWatch, Cause, TICK};
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
    /// How a call that was asked to stop is made to stop.
    policy: InterruptPolicy,
    /// Set by [`Worker::interrupt`]; the waiting caller picks it up at its next tick.
    interrupt_requested: AtomicBool,
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
    ///
    /// `liveness` is `(interval, grace)` in seconds: the worker is pinged every `interval` and
    /// killed as hung after `grace` without an answer (None: no watch). `signal_after` and
    /// `kill_after` are the interrupt escalation's delays (None: leave that step out).
    #[new]
    #[pyo3(signature = (
        name, python, args, env, cwd=None, connect_timeout=60.0, on_event=None,
        liveness=None, signal_after=Some(5.0), kill_after=Some(10.0)
    ))]
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
        liveness: Option<(f64, f64)>,
        signal_after: Option<f64>,
        kill_after: Option<f64>,
    ) -> PyResult<Worker> {
        let secs = |what: &str, s: f64| -> PyResult<Duration> {
            Duration::try_from_secs_f64(s).map_err(|_| {
                pyo3::exceptions::PyValueError::new_err(format!(
                    "{what} must be a non-negative number of seconds, got {s}"
                ))
            })
        };
        let liveness = match liveness {
            Some((interval, grace)) => Some(Liveness {
                interval: secs("liveness interval", interval)?,
                grace: secs("liveness grace", grace)?,
            }),
            None => None,
        };
        let policy = InterruptPolicy {
            signal_after: signal_after.map(|s| secs("signal_after", s)).transpose()?,
            kill_after: kill_after.map(|s| secs("kill_after", s)).transpose()?,
        };
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
                liveness,
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
            policy,
            interrupt_requested: AtomicBool::new(false),
        };
        w.running(py)?;
        Ok(w)
    }

    /// Runs `target` (`"module:qualname"`) in the worker and returns its result.
    ///
    /// While it waits, the call is stopped (see [`CallWatch`]) when `interrupted()` returns
    /// true, when `deadline` seconds have passed, or when [`Worker::interrupt`] is called.
    #[pyo3(signature = (target, args, kwargs=None, interrupted=None, deadline=None))]
    fn call<'py>(
        &self,
        py: Python<'py>,
        target: &str,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
        interrupted: Option<&Bound<'py, PyAny>>,
        deadline: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _serial = slot_lock(py, &self.calls);
        self.interrupt_requested.store(false, Ordering::Release);
        let deadline = deadline
            .map(|d| {
                Duration::try_from_secs_f64(d).map_err(|_| {
                    pyo3::exceptions::PyValueError::new_err(format!(
                        "deadline must be a non-negative number of seconds, got {d}"
                    ))
                })
            })
            .transpose()?;
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
        let mut watch = CallWatch::new(
            id,
            interrupted,
            deadline,
            &self.interrupt_requested,
            self.policy,
        );
        // The first exception raised by an event handler (e.g. ComfyUI's progress hook on an
        // interrupt) is raised once the reply is in: the lane stays in step either way.
        let mut deferred: Option<PyErr> = None;
        let reply = loop {
            // Bookkeeping frames (releases, segments) are absorbed by the lane; what comes
            // out is the answer or an event, and only one call is in flight.
            let got = py.detach(|| call_lane.recv_within(TICK));
            match got {
                Err(LaneError::Io(e)) if e.kind() == std::io::ErrorKind::TimedOut => {
                    watch.tick(py, &process);
                    continue;
                }
                Ok(Some(Message::Event {
                    id: eid,
                    topic,
                    payload,
                })) => {
                    if eid != id {
                        continue; // a straggler of an earlier call: nobody is listening
                    }
                    if topic.ends_with('?') {
                        // A question (e.g. admission before a load): the worker's node waits
                        // for the answer on this lane.
                        let answer = self.answer(py, &lane, &topic, payload);
                        let msg = Message::Event {
                            id,
                            topic,
                            payload: answer,
                        };
                        if let Err(e) = py.detach(|| call_lane.send(&msg)) {
                            return Err(self.fail(py, &process, target, e));
                        }
                        continue;
                    }
                    let handled = decode(py, &lane, payload).and_then(|p| match &self.on_event {
                        Some(h) => h.bind(py).call1((topic, p)).map(drop),
                        None => Ok(()),
                    });
                    if let Err(e) = handled
                        && deferred.is_none()
                    {
                        // The host will raise this; the worker need not finish the call.
                        watch.stop(&process, Cause::Interrupted);
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
                Ok(None) => {
                    let err = self.fail(py, &process, target, LaneError::Closed);
                    return Err(stopped(py, &watch, &self.spec.name, target, err));
                }
                Err(e) => {
                    let err = self.fail(py, &process, target, e);
                    return Err(stopped(py, &watch, &self.spec.name, target, err));
                }
            }
        };
        watch.finish(&process);
        if let Some(e) = deferred {
            if let Message::Reply { value, .. } = reply {
                drop(decode(py, &lane, value)); // its regions are released
            }
            return Err(e);
        }
        match reply {
            Message::Reply { id: rid, value } if rid == id => decode(py, &lane, value),
            Message::Error { id: rid, error } if rid == id => {
                let err = remote_error(py, &lane, &self.spec.name, error);
                Err(stopped(py, &watch, &self.spec.name, target, err))
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
    /// "partially_unload" (`arg` bytes), "partially_load" (`arg` the budget), or, for the
    /// worker rather than a model (`model` unused), "pin_ceiling" or "cache_headroom" (`arg`
    /// bytes: host/ram.py). Returns `(bytes, refusal, report)`: `refusal` is a reason when
    /// nothing was done. A command for a generation that is not running is refused here and
    /// never sent.
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
            "pin_ceiling" => ModelOp::PinCeiling {
                bytes: arg.max(0.0) as u64,
            },
            "cache_headroom" => ModelOp::CacheHeadroom {
                bytes: arg.max(0.0) as u64,
            },
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
            .map_err(|e| {
                // A worker that died under the command says so, with its status.
                match py.detach(|| p.wait_exit(Duration::from_millis(100))) {
                    Some(_) => errors::died(&py.detach(|| p.died("a model command"))),
                    None => errors::lane(&self.spec.name, &e),
                }
            })?;
        let report = decode(py, lane.bind(py), report)?;
        Ok(match outcome {
            ModelOutcome::Done { bytes } => (bytes, None, report),
            ModelOutcome::Refused { reason } => (0, Some(reason), report),
        })
    }

    /// Asks the call running now to stop, as ComfyUI's cancel does: the flag first, then the
    /// escalation this worker was configured with. Callable from any thread; a no-op when no
    /// call is running.
    fn interrupt(&self) {
        self.interrupt_requested.store(true, Ordering::Release);
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

impl Worker {
    /// `on_event(topic, payload)`'s return value, encoded for the worker; if it raises, a
    /// `{"error": message}` the worker raises on its side.
    fn answer(&self, py: Python<'_>, lane: &Bound<'_, Lane>, topic: &str, payload: Value) -> Value {
        let answered = decode(py, lane, payload).and_then(|p| match &self.on_event {
            Some(h) => h.bind(py).call1((topic, p)),
            None => Err(AirlockError::new_err(format!(
                "nobody in the host answers '{topic}'"
            ))),
        });
        let encoded = answered.and_then(|a| {
            let mut enc = Encoder::new(lane);
            enc.encode(&a).inspect_err(|_| enc.abandon())
        });
        encoded.unwrap_or_else(|e| {
            Value::Dict(vec![(
                Value::Str("error".into()),
                Value::Str(format!("the host could not answer '{topic}': {e}")),
            )])
        })
    }
}

/// The error for a call that ended after it was asked to stop: [`errors::CallInterrupted`] or
/// [`errors::DeadlineExceeded`], saying what it took, with the worker's own error as cause.
fn stopped(py: Python<'_>, watch: &CallWatch<'_>, worker: &str, target: &str, err: PyErr) -> PyErr {
    let Some(cause) = watch.cause() else {
        return err;
    };
    let new = match cause {
        Cause::Interrupted => errors::CallInterrupted::new_err(format!(
            "worker '{worker}': the call to '{target}' was interrupted; {}",
            watch.how()
        )),
        Cause::Deadline(d) => errors::DeadlineExceeded::new_err(format!(
            "worker '{worker}': the call to '{target}' did not finish within its deadline of \
             {:.1} s (call-deadline in the pack's airlock.toml); {}",
            d.as_secs_f64(),
            watch.how()
        )),
    };
    new.set_cause(py, Some(err));
    let _ = new.value(py).setattr("escalation", watch.last_step());
    new
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

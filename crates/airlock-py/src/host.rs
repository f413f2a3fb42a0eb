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
use airlock_wire::{ModelOutcome, Side};
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyDict, PyTuple};

use crate::call::CallRequest;
use crate::commands::{self, Command};
use crate::errors::{self, AirlockError};
use crate::lane::Lane;
use crate::shapes;
use crate::sink::PyLogSink;

struct Running {
    process: Arc<WorkerProcess>,
    lane: Py<Lane>,
    /// The route lane's (ADR 0055).
    route_lane: Py<Lane>,
}

/// Which of a worker's call lanes a call takes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// Node calls and everything else, one at a time.
    Call,
    /// The pack's HTTP requests, answered while a call runs (ADR 0055).
    Route,
}

pub(crate) struct Slot {
    running: Option<Running>,
    generation: u64,
    closed: bool,
}

/// A worker process of the host, respawned lazily after it dies.
///
/// Calls are serialized (one exchange at a time per lane) by `calls` and `route_calls`, each
/// held for a whole call; `slot` is held only briefly, so `ping`, `kill` and `close` reach a
/// worker that is busy.
#[pyclass(frozen, module = "comfy_airlock._native")]
pub struct Worker {
    spec: WorkerSpec,
    sink: Arc<dyn OutputSink>,
    slot: Mutex<Slot>,
    pub(crate) calls: Mutex<()>,
    pub(crate) route_calls: Mutex<()>,
    pub(crate) next_id: AtomicU64,
    /// `on_event(topic, payload)` for [`Message::Event`]s of a running call.
    pub(crate) on_event: Option<Py<PyAny>>,
    /// How a call that was asked to stop is made to stop.
    pub(crate) policy: InterruptPolicy,
    /// Set by [`Worker::interrupt`]; the waiting caller picks it up at its next tick.
    pub(crate) interrupt_requested: AtomicBool,
    /// The route lane's calls are never interrupted: this stays false.
    pub(crate) never: AtomicBool,
    /// Calls on the call lane begun and not ended (one runs, others wait for it), and when
    /// the last one ended ([`airlock_supervisor::monotonic_ns`]): the idle trim's clock
    /// ([`Worker::idle_seconds`]), kept here rather than in Python, where noting it cost a
    /// measurable part of a no-op call.
    pub(crate) in_flight: AtomicU64,
    pub(crate) ended: AtomicU64,
}

/// Locks without deadlocking against a thread that holds the lock and waits for the GIL.
pub(crate) fn slot_lock<'a, T>(py: Python<'_>, m: &'a Mutex<T>) -> MutexGuard<'a, T> {
    m.lock_py_attached(py).unwrap_or_else(|p| p.into_inner())
}

impl Worker {
    /// The live process and its lane `via`, starting a new generation if there is none.
    pub(crate) fn running<'py>(
        &self,
        py: Python<'py>,
        via: Via,
    ) -> PyResult<(Arc<WorkerProcess>, Bound<'py, Lane>)> {
        let mut slot = slot_lock(py, &self.slot);
        if slot.closed {
            return Err(AirlockError::new_err(format!(
                "worker '{}' is closed",
                self.spec.name
            )));
        }
        if let Some(r) = &slot.running
            && (!r.process.is_alive() || r.process.call_lane().refusal().is_some())
        {
            // Dead, or ended for refused input (see `fail`): gone before its successor starts.
            let old = slot.running.take().expect("just seen");
            crate::exit_gate::detach(py, || old.process.wait_exit(Duration::from_secs(2)));
        }
        if slot.running.is_none() {
            let generation = slot.generation + 1;
            let process = crate::exit_gate::detach(py, || {
                WorkerProcess::spawn(&self.spec, generation, self.sink.clone())
            })
            .map_err(|e| errors::spawn(&self.spec.name, &e))?;
            slot.generation = generation;
            let lane = Py::new(py, Lane::new(py, process.call_lane().clone(), Side::Host))?;
            let route_lane = Py::new(py, Lane::new(py, process.route_lane().clone(), Side::Host))?;
            self.read_events(py, &process)?;
            slot.running = Some(Running {
                process: Arc::new(process),
                lane,
                route_lane,
            });
        }
        let r = slot.running.as_ref().expect("just ensured");
        let lane = match via {
            Via::Call => &r.lane,
            Via::Route => &r.route_lane,
        };
        Ok((r.process.clone(), lane.bind(py).clone()))
    }

    /// Starts the thread that reads `process`'s events lane for as long as it lives (ADR
    /// 0056): each UI message a pack sent while no call ran goes to `on_event(topic, payload)`
    /// as during a call; an error there is reported as unraisable and reading goes on.
    fn read_events(&self, py: Python<'_>, process: &WorkerProcess) -> PyResult<()> {
        let lane = process.events_lane().clone();
        let lane_obj = Py::new(py, Lane::new(py, lane.clone(), Side::Host))?;
        let on_event = self.on_event.as_ref().map(|h| h.clone_ref(py));
        let deliver = move |topic: String, payload: airlock_wire::Value| {
            crate::exit_gate::with_python(|py| {
                let Some(h) = &on_event else { return };
                let handled = crate::convert::decode(py, lane_obj.bind(py), payload)
                    .and_then(|obj| h.bind(py).call1((topic, obj)).map(drop));
                if let Err(e) = handled {
                    e.write_unraisable(py, Some(h.bind(py)));
                }
            });
        };
        std::thread::Builder::new()
            .name(format!("airlock-events-{}", self.spec.name))
            .spawn(move || {
                airlock_supervisor::read_events(&lane, deliver);
            })
            .map_err(|e| AirlockError::new_err(format!("cannot start the events reader: {e}")))?;
        Ok(())
    }

    /// Turns a broken lane into the right exception, and forgets the process so that the next
    /// call starts a new generation: [`errors::WorkerDied`] for a worker that died,
    /// `ProtocolError` for one that sent input the host refused (its lane's guard has killed
    /// it already) or that broke its lane while alive (killed here).
    pub(crate) fn fail(
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
        if let Some(refused) = process.call_lane().refusal() {
            crate::exit_gate::detach(py, || process.wait_exit(Duration::from_secs(2)));
            return errors::ProtocolError::new_err(format!(
                "worker '{}': {refused}; the worker was ended (the next call starts a new \
                 generation)",
                self.spec.name
            ));
        }
        // Gone (the kernel says so within 100 ms): a death, reported with its status once
        // the reaper has recorded it.
        if crate::exit_gate::detach(py, || process.exited_within(Duration::from_millis(100))) {
            crate::exit_gate::detach(py, || process.wait_exit(Duration::from_secs(2)));
            let during = format!("a call to '{target}'");
            return errors::died(&crate::exit_gate::detach(py, || process.died(&during)));
        }
        // Alive but speaking garbage: it cannot be trusted with another call.
        process.kill();
        errors::lane(&self.spec.name, &e)
    }

    /// The error of a control-lane request (ping, heartbeat, model command); a refusal ends
    /// the worker as one on the call lane does.
    fn control_failed(&self, py: Python<'_>, p: &Arc<WorkerProcess>, e: LaneError) -> PyErr {
        match p.call_lane().refusal() {
            Some(_) => self.fail(py, p, "", e),
            None => errors::lane(&self.spec.name, &e),
        }
    }
}

#[pymethods]
impl Worker {
    /// Starts the worker. `env` is its whole environment as `(name, value)` pairs.
    ///
    /// `liveness` is `(interval, grace)` in seconds: the worker is asked for its memory report
    /// every `interval` (`last_report`) and killed as hung after `grace` without an answer
    /// (grace None: never; liveness None: no timer). `signal_after` and
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
        liveness: Option<(f64, Option<f64>)>,
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
                grace: grace.map(|g| secs("liveness grace", g)).transpose()?,
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
            route_calls: Mutex::new(()),
            next_id: AtomicU64::new(1),
            on_event,
            policy,
            interrupt_requested: AtomicBool::new(false),
            never: AtomicBool::new(false),
            in_flight: AtomicU64::new(0),
            ended: AtomicU64::new(airlock_supervisor::monotonic_ns()),
        };
        w.running(py, Via::Call)?;
        Ok(w)
    }

    /// Runs `target` (`"module:qualname"`) in the worker and returns its result.
    ///
    /// While it waits, the call is stopped (see `airlock_supervisor::CallWatch`) when `interrupted()` returns
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
        let deadline = deadline
            .map(|d| {
                Duration::try_from_secs_f64(d).map_err(|_| {
                    pyo3::exceptions::PyValueError::new_err(format!(
                        "deadline must be a non-negative number of seconds, got {d}"
                    ))
                })
            })
            .transpose()?;
        let req = CallRequest {
            target,
            args,
            kwargs,
            interrupted,
            deadline,
            via: Via::Call,
        };
        self.run_call(py, req)
    }

    /// Seconds since the last call on the call lane ended (or since the start, before the
    /// first); None while one runs or waits to. Route calls do not count.
    fn idle_seconds(&self) -> Option<f64> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let ended = self.ended.load(Ordering::Acquire);
        Some(airlock_supervisor::monotonic_ns().saturating_sub(ended) as f64 / 1e9)
    }

    /// Runs `target` in the worker on its route lane: beside the call lane's call, if one
    /// runs, one route call at a time (ADR 0055). Never interrupted and without a deadline:
    /// the caller bounds it (the worker's own handler is cancelled at the request's expiry).
    #[pyo3(signature = (target, args, kwargs=None))]
    fn route_call<'py>(
        &self,
        py: Python<'py>,
        target: &str,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let req = CallRequest {
            target,
            args,
            kwargs,
            interrupted: None,
            deadline: None,
            via: Via::Route,
        };
        self.run_call(py, req)
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
    pub(crate) fn name(&self) -> &str {
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

    /// What the call lane knows about its waits (ADR 0046): its spin, its wake-ups, both
    /// sides' last receipt and send; None when no process is running.
    fn lane_timing<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let slot = slot_lock(py, &self.slot);
        let Some(r) = &slot.running else {
            return Ok(None);
        };
        let t = r.process.call_lane().timing();
        let us = |ns: u64| ns as f64 / 1e3;
        let d = PyDict::new(py);
        d.set_item("spin_us", us(t.spin_ns))?;
        d.set_item("wake_us", (t.wake_ns > 0).then(|| us(t.wake_ns)))?;
        d.set_item(
            "last_wait_us",
            (t.last_wait_ns != u64::MAX).then(|| us(t.last_wait_ns)),
        )?;
        d.set_item("host_got_ns", t.host.0)?;
        d.set_item("host_sent_ns", t.host.1)?;
        d.set_item("worker_got_ns", t.worker.0)?;
        d.set_item("worker_sent_ns", t.worker.1)?;
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
        crate::exit_gate::detach(py, || p.ping(Duration::from_secs_f64(timeout)))
            .map(|d| d.as_secs_f64())
            .map_err(|e| self.control_failed(py, &p, e))
    }

    /// The worker's latest memory report as its liveness timer last read it; None when no
    /// process is running or none was read yet. Sends nothing.
    fn last_report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let report = {
            let slot = slot_lock(py, &self.slot);
            slot.running.as_ref().and_then(|r| r.process.last_report())
        };
        shapes::report_or_none(py, report.as_ref())
    }

    /// Runs a command in the worker of `generation`: `op` is "unload", "partially_unload"
    /// (`arg` bytes), "partially_load" (`arg` the budget), or, for the worker rather than a
    /// model (`model` unused), "pin_ceiling" or "cache_headroom" (`arg` bytes: host/ram.py).
    /// Returns `(bytes, refusal, report)`: `refusal` is a reason when nothing was done. A
    /// command for a generation that is not running is refused here and never sent.
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
        let command = commands::parse(op, arg)?;
        let process = {
            let slot = slot_lock(py, &self.slot);
            slot.running
                .as_ref()
                .filter(|r| r.process.generation() == generation && r.process.is_alive())
                .map(|r| r.process.clone())
        };
        let Some(p) = process else {
            let reason = format!(
                "generation {generation} of worker '{}' is gone",
                self.spec.name
            );
            return Ok((0, Some(reason), py.None().into_bound(py)));
        };
        let timeout = Duration::from_secs_f64(timeout);
        let (outcome, report) = crate::exit_gate::detach(py, || match command {
            Command::Model(op) => p.model_command(model, op, timeout),
            Command::Set(setting) => p.set(setting, timeout),
        })
        .map_err(|e| {
            // A worker that died under the command says so, with its status.
            let refused = p.call_lane().refusal().is_some();
            if !refused
                && crate::exit_gate::detach(py, || p.exited_within(Duration::from_millis(100)))
            {
                crate::exit_gate::detach(py, || p.wait_exit(Duration::from_secs(2)));
                return errors::died(&crate::exit_gate::detach(py, || p.died("a model command")));
            }
            self.control_failed(py, &p, e)
        })?;
        let report = shapes::report_or_none(py, report.as_ref())?;
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

    /// SIGKILL the current process and wait (at most 2 s) until it is gone; the next call
    /// starts a new generation. A call running meanwhile fails with `WorkerDied`.
    fn kill(&self, py: Python<'_>) {
        let running = slot_lock(py, &self.slot).running.take();
        if let Some(r) = running {
            r.process.kill();
            crate::exit_gate::detach(py, || r.process.wait_exit(Duration::from_secs(2)));
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
        let status =
            crate::exit_gate::detach(py, || r.process.shutdown(Duration::from_secs_f64(grace)));
        Some(status.to_string())
    }
}

//! `Worker.call`: the arguments encoded, the call run by the supervisor's call loop
//! ([`airlock_supervisor::exchange`]), the result decoded; and [`PyCallHost`], what only Python
//! does during the call (decode values, run `on_event`, answer questions, read ComfyUI's
//! cancel flag).
//!
//! A call that breaks (the worker died, or sent what the protocol forbids and was ended) fails
//! with the right exception, and the next call starts a new generation (see
//! [`Worker::fail`](crate::host::Worker)).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use airlock_supervisor::{
    Broken, CallHost, CallWatch, Cause, Ended, LaneError, WorkerProcess, exchange_on,
};
use airlock_wire::{Answer, Message, Notice, Question, RemoteException, Value};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::convert::{Encoder, decode};
use crate::errors::{self, AirlockError};
use crate::hooks::hooks;
use crate::host::{Via, Worker, slot_lock};
use crate::lane::Lane;
use crate::shapes;

/// What `Worker.call` was given.
pub(crate) struct CallRequest<'a, 'py> {
    /// `"module:qualname"`.
    pub target: &'a str,
    pub args: &'a Bound<'py, PyTuple>,
    pub kwargs: Option<&'a Bound<'py, PyDict>>,
    /// `interrupted() -> bool`, ComfyUI's cancel flag.
    pub interrupted: Option<&'a Bound<'py, PyAny>>,
    /// From the send on.
    pub deadline: Option<Duration>,
    /// Which call lane.
    pub via: Via,
}

impl Worker {
    /// [`Worker::call`](crate::host::Worker)'s body.
    pub(crate) fn run_call<'py>(
        &self,
        py: Python<'py>,
        req: CallRequest<'_, 'py>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let CallRequest {
            target,
            args,
            kwargs,
            interrupted,
            deadline,
            via,
        } = req;
        let (serial, requested) = match via {
            Via::Call => (&self.calls, &self.interrupt_requested),
            Via::Route => (&self.route_calls, &self.never),
        };
        let _timed = (via == Via::Call).then(|| CallTimes::begin(self));
        let _serial = slot_lock(py, serial);
        if via == Via::Call {
            self.interrupt_requested.store(false, Ordering::Release);
        }
        let (process, lane) = self.running(py, via)?;
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
        // The deadline counts from here: a worker that does not even take the call is as late
        // as one that does not answer it.
        let mut watch = CallWatch::new(id, deadline, requested, self.policy);
        let mut host = PyCallHost {
            py,
            worker: self,
            lane: &lane,
            interrupted,
        };
        let ended = exchange_on(&process, &lane.get().inner, &msg, id, &mut watch, &mut host);
        watch.finish(&process);
        let done = Done {
            worker: self,
            process: &process,
            lane: &lane,
            target,
            watch: &watch,
        };
        done.result(py, ended)
    }
}

/// Counts a call on the call lane from its start (waiting for the one that runs included) to
/// its end, however it ends, and notes when it ended: the idle trim's clock
/// ([`Worker::idle_seconds`]), which must not read idle while a second call waits or runs.
struct CallTimes<'a>(&'a Worker);

impl<'a> CallTimes<'a> {
    fn begin(w: &'a Worker) -> Self {
        w.in_flight.fetch_add(1, Ordering::AcqRel);
        CallTimes(w)
    }
}

impl Drop for CallTimes<'_> {
    fn drop(&mut self) {
        let w = self.0;
        w.ended
            .store(airlock_supervisor::monotonic_ns(), Ordering::Release);
        w.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What only Python does while the supervisor's loop runs a call.
struct PyCallHost<'a, 'py> {
    py: Python<'py>,
    worker: &'a Worker,
    lane: &'a Bound<'py, Lane>,
    /// `interrupted() -> bool`, e.g. the host's `comfy.model_management.processing_interrupted`.
    interrupted: Option<&'a Bound<'py, PyAny>>,
}

impl<'py> CallHost for PyCallHost<'_, 'py> {
    type Decoded = Bound<'py, PyAny>;
    type Error = PyErr;

    fn blocking<T: Send>(&mut self, wait: impl FnOnce() -> T + Send) -> T {
        crate::exit_gate::detach(self.py, wait)
    }

    fn interrupted(&mut self) -> bool {
        let Some(f) = self.interrupted else {
            return false;
        };
        match f.call0().and_then(|r| r.is_truthy()) {
            Ok(b) => b,
            Err(e) => {
                // A broken interrupt source must not break the call: it is reported once and
                // not asked again during this call.
                e.write_unraisable(self.py, Some(f));
                self.interrupted = None;
                false
            }
        }
    }

    fn decode(&mut self, value: Value) -> PyResult<Bound<'py, PyAny>> {
        decode(self.py, self.lane, value)
    }

    fn event(&mut self, topic: String, payload: Bound<'py, PyAny>) -> PyResult<()> {
        match &self.worker.on_event {
            Some(h) => h.bind(self.py).call1((topic, payload)).map(drop),
            None => Ok(()),
        }
    }

    /// `on_event(topic, payload)`'s return value, encoded for the worker; if it raises (or the
    /// question could not be decoded), a `{"error": message}` the worker raises on its side.
    fn answer(&mut self, topic: &str, payload: PyResult<Bound<'py, PyAny>>) -> Value {
        let answered = payload.and_then(|p| self.on_question(topic, p.into_any()));
        let encoded = answered.and_then(|a| {
            let mut enc = Encoder::new(self.lane);
            enc.encode(&a).inspect_err(|_| enc.abandon())
        });
        encoded.unwrap_or_else(|e| {
            Value::Dict(vec![(
                Value::Str("error".into()),
                Value::Str(cannot_answer(topic, &e)),
            )])
        })
    }

    /// `on_event("admit?" | "oom?", request)`, its admission record read for the worker.
    fn ask(&mut self, question: Question) -> Answer {
        let py = self.py;
        let (topic, payload) = match shapes::question_to_py(py, &question) {
            Ok(q) => q,
            Err(e) => return unanswered("a memory question", &e),
        };
        let decided = self
            .on_question(topic, payload.into_any())
            .and_then(|a| shapes::admission(&a));
        match decided {
            Ok(a) => Answer::Decided(a),
            Err(e) => unanswered(topic, &e),
        }
    }

    fn notice(&mut self, notice: Notice) -> PyResult<()> {
        let (topic, payload) = shapes::notice_to_py(self.py, &notice)?;
        self.event(topic.to_owned(), payload.into_any())
    }
}

impl<'py> PyCallHost<'_, 'py> {
    fn on_question(&self, topic: &str, payload: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        match &self.worker.on_event {
            Some(h) => h.bind(self.py).call1((topic, payload)),
            None => Err(AirlockError::new_err(format!(
                "nobody in the host answers '{topic}'"
            ))),
        }
    }
}

fn cannot_answer(topic: &str, e: &PyErr) -> String {
    format!("the host could not answer '{topic}': {e}")
}

fn unanswered(topic: &str, e: &PyErr) -> Answer {
    Answer::Unanswered {
        reason: cannot_answer(topic, e),
    }
}

/// A call's end, turned into its result or the right exception.
struct Done<'a, 'py> {
    worker: &'a Worker,
    process: &'a Arc<WorkerProcess>,
    lane: &'a Bound<'py, Lane>,
    target: &'a str,
    watch: &'a CallWatch<'a>,
}

impl<'py> Done<'_, 'py> {
    fn result(
        &self,
        py: Python<'py>,
        ended: Result<Ended<PyErr>, Broken>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match ended {
            Ok(Ended::Replied {
                value,
                deferred: None,
            }) => decode(py, self.lane, value).map_err(|e| self.checked(py, e)),
            Ok(Ended::Replied {
                value,
                deferred: Some(e),
            }) => {
                // Its regions are released; a forgery in it still ends the worker.
                let _ = decode(py, self.lane, value).map_err(|e| self.checked(py, e));
                Err(e)
            }
            Ok(Ended::Raised { error, deferred }) => {
                let err = self.checked(py, remote_error(py, self.lane, self.worker.name(), error));
                Err(deferred.unwrap_or_else(|| self.stopped(py, err)))
            }
            Err(Broken::Lane(e)) => Err(self.stopped(py, self.fail(py, e))),
            Err(Broken::Refused) => Err(self.fail(py, LaneError::Closed)),
        }
    }

    /// `err` from decoding a value; if the value was refused, the worker's end is made
    /// official (the next call starts a new generation) and the error says so.
    fn checked(&self, py: Python<'_>, err: PyErr) -> PyErr {
        match self.process.call_lane().refusal() {
            Some(_) => self.fail(py, LaneError::Closed),
            None => err,
        }
    }

    fn fail(&self, py: Python<'_>, e: LaneError) -> PyErr {
        self.worker.fail(py, self.process, self.target, e)
    }

    fn stopped(&self, py: Python<'_>, err: PyErr) -> PyErr {
        stopped(py, self.watch, self.worker.name(), self.target, err)
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

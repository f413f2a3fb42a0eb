//! One call from the host: send, wait, answer questions, take the reply, with the interrupt
//! sources watched the whole time, the send included.
//!
//! Both halves of the exchange wait in slices of [`TICK`]: a send whose peer stopped reading
//! returns `TimedOut` with the rest of its frame queued (the lane carries on from there), a
//! receive returns `TimedOut` with a half-read frame kept. Between slices the [`CallWatch`]
//! looks at the deadline, ComfyUI's interrupt and `Worker.interrupt`, and runs the escalation
//! (flag, SIGINT, kill); liveness and `close()` act from their own threads, and a kill wakes
//! the blocked send at once. So no wait on the worker is unbounded.
//!
//! Input the worker sends that the protocol forbids ends the worker (the lane's guard kills it
//! and counts the refusal once); the call fails with `ProtocolError` and the next call starts
//! a new generation.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use airlock_supervisor::{CallLane, LaneError, WorkerProcess};
use airlock_wire::{Message, RemoteException, Value};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::call_watch::{CallWatch, Cause, TICK};
use crate::convert::{Encoder, decode};
use crate::errors::{self, AirlockError};
use crate::hooks::hooks;
use crate::host::{Worker, slot_lock};
use crate::lane::Lane;

fn is_timeout(e: &LaneError) -> bool {
    matches!(e, LaneError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut)
}

impl Worker {
    /// [`Worker::call`](crate::host::Worker)'s body.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_call<'py>(
        &self,
        py: Python<'py>,
        target: &str,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
        interrupted: Option<&Bound<'py, PyAny>>,
        deadline: Option<Duration>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _serial = slot_lock(py, &self.calls);
        self.interrupt_requested.store(false, Ordering::Release);
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
        // The deadline counts from here: a worker that does not even take the call is as late
        // as one that does not answer it.
        let mut watch = CallWatch::new(
            id,
            interrupted,
            deadline,
            &self.interrupt_requested,
            self.policy,
        );
        let x = Exchange {
            worker: self,
            process: &process,
            lane: &lane,
            call_lane: process.call_lane().clone(),
            target,
            id,
        };
        if let Err(e) = x.send(py, &mut watch, &msg) {
            return Err(x.stopped(py, &watch, x.fail(py, e)));
        }
        let reply = x.wait(py, &mut watch);
        watch.finish(&process);
        reply
    }
}

/// The state of one call.
struct Exchange<'a, 'py> {
    worker: &'a Worker,
    process: &'a Arc<WorkerProcess>,
    lane: &'a Bound<'py, Lane>,
    call_lane: Arc<CallLane>,
    target: &'a str,
    id: u64,
}

impl<'py> Exchange<'_, 'py> {
    /// Sends `msg`, watching the interrupt sources while the worker does not take it.
    fn send(
        &self,
        py: Python<'py>,
        watch: &mut CallWatch<'_>,
        msg: &Message,
    ) -> Result<(), LaneError> {
        let lane = &self.call_lane;
        let mut sent = py.detach(|| lane.send_within(msg, Some(TICK)));
        while sent.as_ref().is_err_and(is_timeout) {
            watch.tick(py, self.process);
            sent = py.detach(|| lane.flush_within(TICK));
        }
        sent
    }

    /// Waits for the reply, handling events and questions; returns the call's result.
    fn wait(&self, py: Python<'py>, watch: &mut CallWatch<'_>) -> PyResult<Bound<'py, PyAny>> {
        // The first exception raised by an event handler (e.g. ComfyUI's progress hook on an
        // interrupt) is raised once the reply is in: the lane stays in step either way.
        let mut deferred: Option<PyErr> = None;
        let reply = loop {
            // Bookkeeping frames (releases, segments) are absorbed by the lane; what comes
            // out is the answer or an event, and only one call is in flight.
            let lane = &self.call_lane;
            let got = py.detach(|| lane.recv_within(TICK));
            match got {
                Err(e) if is_timeout(&e) => watch.tick(py, self.process),
                Ok(Some(Message::Event { id, topic, payload })) => {
                    self.event(py, watch, id, topic, payload, &mut deferred)?;
                }
                Ok(Some(m @ (Message::Reply { .. } | Message::Error { .. }))) => break m,
                Ok(Some(other)) => {
                    let why = format!("unexpected {} on the call lane", other.kind());
                    return Err(self.refuse(py, watch, why));
                }
                Ok(None) => return Err(self.stopped(py, watch, self.fail(py, LaneError::Closed))),
                Err(e) => return Err(self.stopped(py, watch, self.fail(py, e))),
            }
        };
        let (rid, result) = match reply {
            Message::Reply { id, value } => (id, Ok(value)),
            Message::Error { id, error } => (id, Err(error)),
            _ => unreachable!("only replies and errors leave the loop"),
        };
        if rid != self.id {
            return Err(self.refuse(
                py,
                watch,
                format!("a reply for call {rid}, not {}", self.id),
            ));
        }
        match (result, deferred) {
            (Ok(value), None) => decode(py, self.lane, value).map_err(|e| self.checked(py, e)),
            (Ok(value), Some(e)) => {
                // Its regions are released; a forgery in it still ends the worker.
                let _ = decode(py, self.lane, value).map_err(|e| self.checked(py, e));
                Err(e)
            }
            (Err(error), deferred) => {
                let err = self.checked(py, remote_error(py, self.lane, self.worker.name(), error));
                Err(deferred.unwrap_or_else(|| self.stopped(py, watch, err)))
            }
        }
    }

    /// An event of the running call: a question is answered on the lane, anything else goes
    /// to `on_event`. An event of an earlier call (a straggler) is dropped; one of a call
    /// never made is refused.
    fn event(
        &self,
        py: Python<'py>,
        watch: &mut CallWatch<'_>,
        id: u64,
        topic: String,
        payload: Value,
        deferred: &mut Option<PyErr>,
    ) -> PyResult<()> {
        if id > self.id || id == 0 {
            return Err(self.refuse(py, watch, format!("an event for call {id}, never made")));
        }
        // Decoded even for a straggler, so its regions are released (and checked).
        let decoded = decode(py, self.lane, payload);
        if decoded.is_err() && self.call_lane.refusal().is_some() {
            return Err(self.fail(py, LaneError::Closed));
        }
        if id != self.id {
            return Ok(());
        }
        if topic.ends_with('?') {
            // A question (e.g. admission before a load): the worker's node waits for the
            // answer on this lane.
            let payload = self.worker.answer(py, self.lane, &topic, decoded);
            let msg = Message::Event { id, topic, payload };
            return self
                .send(py, watch, &msg)
                .map_err(|e| self.stopped(py, watch, self.fail(py, e)));
        }
        let handled = decoded.and_then(|p| match &self.worker.on_event {
            Some(h) => h.bind(py).call1((topic, p)).map(drop),
            None => Ok(()),
        });
        if let Err(e) = handled
            && deferred.is_none()
        {
            // The host will raise this; the worker need not finish the call.
            watch.stop(self.process, Cause::Interrupted);
            *deferred = Some(e);
        }
        Ok(())
    }

    /// Refuses what the worker sent (counted once, the worker ended) and fails the call.
    fn refuse(&self, py: Python<'_>, watch: &CallWatch<'_>, why: String) -> PyErr {
        let e = self.call_lane.refuse(LaneError::Protocol(why));
        self.stopped(py, watch, self.fail(py, e))
    }

    /// `err` from decoding a value; if the value was refused, the worker's end is made
    /// official (the next call starts a new generation) and the error says so.
    fn checked(&self, py: Python<'_>, err: PyErr) -> PyErr {
        match self.call_lane.refusal() {
            Some(_) => self.fail(py, LaneError::Closed),
            None => err,
        }
    }

    fn fail(&self, py: Python<'_>, e: LaneError) -> PyErr {
        self.worker.fail(py, self.process, self.target, e)
    }

    fn stopped(&self, py: Python<'_>, watch: &CallWatch<'_>, err: PyErr) -> PyErr {
        stopped(py, watch, self.worker.name(), self.target, err)
    }
}

impl Worker {
    /// `on_event(topic, payload)`'s return value, encoded for the worker; if it raises (or
    /// the question could not be decoded), a `{"error": message}` the worker raises on its
    /// side.
    fn answer(
        &self,
        py: Python<'_>,
        lane: &Bound<'_, Lane>,
        topic: &str,
        payload: PyResult<Bound<'_, PyAny>>,
    ) -> Value {
        let answered = payload.and_then(|p| match &self.on_event {
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

//! The worker's call loop and its questions to the host, kept out of the worker's language.
//!
//! [`serve`] receives calls until the host says stop or goes away; for each it decodes the
//! arguments, finds the target (once per target name), runs it, and sends the result or the
//! exception. What only the worker's language can do is the [`Runner`] it is given (the Python
//! runtime in the binding, plain Rust in this crate's tests).
//!
//! Order matters for shared memory: the call's arguments and result are dropped before the
//! reply is sent, so the releases of their regions go out in front of it and the host's next
//! call reuses the same regions (docs/adr/0002-releases-on-the-call-lane.md).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use airlock_wire::{Answer, Message, Question, RemoteException, Value};

use crate::connect::kill_forked_children;
use crate::error::LaneError;
use crate::lane::CallLane;

/// What the worker's side of a call does that the supervisor cannot.
pub trait Runner {
    /// A call's arguments, decoded into the worker's objects.
    type Args;
    /// A resolved call target (Python: the callable).
    type Target;
    /// An error raised by the worker's code.
    type Error;

    /// Runs `wait` (a blocking wait on the lane) so that the worker's other threads may run
    /// meanwhile (Python: with the GIL released).
    fn blocking<T: Send>(&mut self, wait: impl FnOnce() -> T + Send) -> T;
    /// Decodes a call's positional and keyword arguments.
    fn decode_args(&mut self, args: Value, kwargs: Value) -> Result<Self::Args, Self::Error>;
    /// Finds `target` (`"module:qualname"`); done once per target name, then cached.
    fn resolve(&mut self, target: &str) -> Result<Self::Target, Self::Error>;
    /// Runs the target and encodes its result for the host.
    fn invoke(&mut self, target: &Self::Target, args: Self::Args) -> Result<Value, Self::Error>;
    /// What the host needs to raise `error` again; an error here ends the loop.
    fn describe(&mut self, error: Self::Error) -> Result<RemoteException, Self::Error>;
}

/// Why the call loop ended without the host saying stop.
#[derive(Debug)]
pub enum ServeError<E> {
    /// The call lane failed.
    Lane(LaneError),
    /// The host sent something other than a call or a shutdown.
    Unexpected(&'static str),
    /// Describing an exception failed.
    Runner(E),
}

/// Which call runs now and when the last one ended, read by the worker's other threads (the
/// interrupt check, events, the idle trim).
#[derive(Debug)]
pub struct CallState {
    /// The id of the call running now; 0 between calls (ids start at 1).
    current: AtomicU64,
    /// When the last call ended, in nanoseconds since `started` (for the idle trim).
    last_end: AtomicU64,
    started: Instant,
}

impl Default for CallState {
    fn default() -> Self {
        Self::new()
    }
}

impl CallState {
    /// No call yet; idle since now.
    pub fn new() -> Self {
        Self {
            current: AtomicU64::new(0),
            last_end: AtomicU64::new(0),
            started: Instant::now(),
        }
    }

    /// The id of the call running now, 0 between calls.
    pub fn current(&self) -> u64 {
        self.current.load(Ordering::Acquire)
    }

    /// Seconds since the last call ended (or since the start, before the first); None while a
    /// call runs.
    pub fn idle_seconds(&self) -> Option<f64> {
        if self.current() != 0 {
            return None;
        }
        let end = Duration::from_nanos(self.last_end.load(Ordering::Acquire));
        Some(self.started.elapsed().saturating_sub(end).as_secs_f64())
    }

    fn begin(&self, id: u64) {
        self.current.store(id, Ordering::Release);
    }

    fn end(&self) {
        let now = self.started.elapsed().as_nanos() as u64;
        self.last_end.store(now, Ordering::Release);
        self.current.store(0, Ordering::Release);
    }
}

/// Runs calls from the host until it says stop (`Ok`) or goes away (`Ok`, after killing what
/// this worker forked). `calls` says which call runs now.
pub fn serve<R: Runner>(
    lane: &CallLane,
    calls: &CallState,
    runner: &mut R,
) -> Result<(), ServeError<R::Error>> {
    let mut targets: HashMap<String, R::Target> = HashMap::new();
    // The reply to the last call goes out in the same wait as the read of the next one: one
    // release of the worker's language (Python: its GIL) per call, not two.
    let mut reply: Option<Message> = None;
    loop {
        let got = runner.blocking(|| {
            if let Some(msg) = reply.take() {
                lane.send(&msg)?;
            }
            lane.recv()
        });
        let (id, target, args, kwargs) = match got {
            Err(e) => return Err(ServeError::Lane(e)),
            Ok(Some(Message::Shutdown)) => return Ok(()),
            Ok(None) => {
                // The host is gone: so is anything this worker forked.
                kill_forked_children();
                return Ok(());
            }
            Ok(Some(Message::Call {
                id,
                target,
                args,
                kwargs,
            })) => (id, target, args, kwargs),
            Ok(Some(other)) => return Err(ServeError::Unexpected(other.kind())),
        };
        calls.begin(id);
        // Everything that references the host's regions (arguments, the result) is dropped
        // by the time `run` returns: their releases go before the reply.
        let outcome = run(runner, &mut targets, &target, args, kwargs);
        calls.end();
        reply = Some(match outcome {
            Ok(value) => Message::Reply { id, value },
            Err(e) => Message::Error {
                id,
                error: runner.describe(e).map_err(ServeError::Runner)?,
            },
        });
    }
}

/// One call: arguments first (so that their regions are taken, and released, whatever fails
/// next), then the target, then the call.
fn run<R: Runner>(
    runner: &mut R,
    targets: &mut HashMap<String, R::Target>,
    target: &str,
    args: Value,
    kwargs: Value,
) -> Result<Value, R::Error> {
    let args = runner.decode_args(args, kwargs)?;
    let f = match targets.get(target) {
        Some(f) => f,
        None => {
            let f = runner.resolve(target)?;
            targets.entry(target.to_owned()).or_insert(f)
        }
    };
    runner.invoke(f, args)
}

/// Why a question to the host got no answer.
#[derive(Debug)]
pub enum AskError {
    /// The call lane failed.
    Lane(LaneError),
    /// The host closed the call lane.
    Closed,
    /// The host sent something else than the answer (the message's kind).
    Unexpected(&'static str),
}

/// The worker's side of a memory question from the running call `id`: sends it, then reads
/// the host's answer on the call lane (the node's own thread reads it: the serve loop is
/// inside the call). Blocks; the caller lets its other threads run.
pub fn ask(lane: &CallLane, id: u64, question: Question) -> Result<Answer, AskError> {
    lane.send(&Message::Ask { id, question })
        .map_err(AskError::Lane)?;
    match lane.recv().map_err(AskError::Lane)? {
        Some(Message::Answer { id: aid, answer }) if aid == id => Ok(answer),
        Some(other) => Err(AskError::Unexpected(other.kind())),
        None => Err(AskError::Closed),
    }
}

/// The answer to a question asked as an event (`topic` ends in `?`, already sent by the
/// caller): the host's `Event` of the same call and topic.
pub fn await_answer(lane: &CallLane, id: u64, topic: &str) -> Result<Value, AskError> {
    match lane.recv().map_err(AskError::Lane)? {
        Some(Message::Event {
            id: aid,
            topic: t,
            payload,
        }) if aid == id && t == topic => Ok(payload),
        Some(other) => Err(AskError::Unexpected(other.kind())),
        None => Err(AskError::Closed),
    }
}

//! One call from the host: send, wait, answer questions, take the reply, with the interrupt
//! sources watched the whole time, the send included.
//!
//! Both halves of the exchange wait in slices of [`TICK`]: a send whose peer stopped reading
//! returns `TimedOut` with the rest of its frame queued (the lane carries on from there), a
//! receive returns `TimedOut` with a half-read frame kept. Between slices the [`CallWatch`]
//! looks at the deadline, the host's interrupt and the interrupt requested from another
//! thread, and runs the escalation (flag, SIGINT, kill); liveness and `close()` act from their
//! own threads, and a kill wakes the blocked send at once. So no wait on the worker is
//! unbounded.
//!
//! Input the worker sends that the protocol forbids ends the worker (the lane's guard kills it
//! and counts the refusal once); the call ends with [`Broken`] and the caller starts a new
//! generation for the next call.
//!
//! What only the host's language can do (decode a value into its objects, run its event
//! handlers, answer its questions, look at its cancel flag, let other threads run while this
//! one waits) is the [`CallHost`] the caller passes; the Python binding is one, the tests of
//! this crate another.

use std::sync::Arc;

use airlock_wire::{Answer, Message, Notice, Question, RemoteException, Value};

use crate::call_watch::{CallWatch, Cause, TICK};
use crate::error::LaneError;
use crate::framed::is_timeout;
use crate::lane::CallLane;
use crate::process::WorkerProcess;

/// What the host's side of a call does that the supervisor cannot: everything that touches the
/// host's own objects.
pub trait CallHost {
    /// A value decoded into the host's objects. Decoding takes the value's shared-memory
    /// regions into views; dropping them releases the regions.
    type Decoded;
    /// An error raised by the host's code.
    type Error;

    /// Runs `wait` (a blocking wait on the lane) so that the host's other threads may run
    /// meanwhile (Python: with the GIL released).
    fn blocking<T: Send>(&mut self, wait: impl FnOnce() -> T + Send) -> T;
    /// Whether the host asked the running call to stop (ComfyUI's cancel); asked every
    /// [`TICK`] while nothing else asked first.
    fn interrupted(&mut self) -> bool;
    /// Decodes a value the worker sent. A value referring to shared memory the worker does
    /// not have is refused by the lane (the worker is ended) and fails here.
    fn decode(&mut self, value: Value) -> Result<Self::Decoded, Self::Error>;
    /// An event of the running call (progress, a preview, a UI message). An error is raised
    /// to the caller once the reply is in, and the call is asked to stop meanwhile.
    fn event(&mut self, topic: String, payload: Self::Decoded) -> Result<(), Self::Error>;
    /// The answer, encoded, to the running call's question `topic` (ends in `?`); an answer
    /// saying it failed when `payload` did not decode or the host's handler raised.
    fn answer(&mut self, topic: &str, payload: Result<Self::Decoded, Self::Error>) -> Value;
    /// The host's answer to a memory question of the running call.
    fn ask(&mut self, question: Question) -> Answer;
    /// Memory news of the running call; an error is treated as an event's.
    fn notice(&mut self, notice: Notice) -> Result<(), Self::Error>;
}

/// How a call ended, when the lane stayed in step.
pub enum Ended<E> {
    /// The worker returned `value` (not decoded yet).
    Replied { value: Value, deferred: Option<E> },
    /// The worker raised `error`.
    Raised {
        error: RemoteException,
        deferred: Option<E>,
    },
}

impl<E> Ended<E> {
    /// The first error an event or notice handler raised during the call, if any.
    pub fn deferred(&self) -> Option<&E> {
        match self {
            Ended::Replied { deferred, .. } | Ended::Raised { deferred, .. } => deferred.as_ref(),
        }
    }
}

/// Why a call has no result: the worker cannot be used any more.
#[derive(Debug)]
pub enum Broken {
    /// The lane failed (the worker died, or stopped reading), or the worker sent what the
    /// protocol forbids (refused and counted; the worker is ended).
    Lane(LaneError),
    /// A value the worker sent was refused while it was decoded (the worker is ended).
    Refused,
}

/// Runs the call `call` (whose id is `id`) on `process` to its end: sends it, answers the
/// worker's questions, hands its events to `host`, and returns the reply. `watch` is the
/// call's; the caller withdraws an unconsumed interrupt with [`CallWatch::finish`].
pub fn exchange<H: CallHost>(
    process: &WorkerProcess,
    call: &Message,
    id: u64,
    watch: &mut CallWatch<'_>,
    host: &mut H,
) -> Result<Ended<H::Error>, Broken> {
    exchange_on(process, process.call_lane(), call, id, watch, host)
}

/// [`exchange`] on `lane`, one of `process`'s call lanes (the route lane's calls run beside
/// the call lane's: ADR 0055).
pub fn exchange_on<H: CallHost>(
    process: &WorkerProcess,
    lane: &Arc<CallLane>,
    call: &Message,
    id: u64,
    watch: &mut CallWatch<'_>,
    host: &mut H,
) -> Result<Ended<H::Error>, Broken> {
    let s = Session { process, lane, id };
    let first = s.send_and_read(host, watch, call).map_err(Broken::Lane)?;
    s.wait(host, watch, first)
}

/// What a lane read gives.
type Read = Result<Option<Message>, LaneError>;

/// The state of one call.
struct Session<'a> {
    process: &'a WorkerProcess,
    lane: &'a Arc<CallLane>,
    id: u64,
}

impl Session<'_> {
    /// Sends `msg`, watching the interrupt sources while the worker does not take it.
    fn send<H: CallHost>(
        &self,
        host: &mut H,
        watch: &mut CallWatch<'_>,
        msg: &Message,
    ) -> Result<(), LaneError> {
        let lane = self.lane;
        let sent = host.blocking(|| lane.send_within(msg, Some(TICK)));
        self.flushed(host, watch, sent)
    }

    /// A send that timed out (the worker did not take it all within a [`TICK`]) flushed to its
    /// end, watching the interrupt sources each tick; any other outcome as it is.
    fn flushed<H: CallHost>(
        &self,
        host: &mut H,
        watch: &mut CallWatch<'_>,
        mut sent: Result<(), LaneError>,
    ) -> Result<(), LaneError> {
        let lane = self.lane;
        while sent.as_ref().is_err_and(is_timeout) {
            watch.tick(self.process, || host.interrupted());
            sent = host.blocking(|| lane.flush_within(TICK));
        }
        sent
    }

    /// Sends the call and, when it went at once, reads the first answer in the same wait: one
    /// release of the host's language (Python: its GIL) for the usual call, not two. The read
    /// (None when the send timed out) is [`Session::wait`]'s first.
    fn send_and_read<H: CallHost>(
        &self,
        host: &mut H,
        watch: &mut CallWatch<'_>,
        msg: &Message,
    ) -> Result<Option<Read>, LaneError> {
        let lane = self.lane;
        let (sent, first) = host.blocking(|| {
            let sent = lane.send_within(msg, Some(TICK));
            let first = sent.is_ok().then(|| lane.recv_within(TICK));
            (sent, first)
        });
        // `first` is None when the send did not go at once: read after the flush.
        self.flushed(host, watch, sent).map(|()| first)
    }

    /// Waits for the reply, handling events, questions and notices; `first` is a read already
    /// made.
    fn wait<H: CallHost>(
        &self,
        host: &mut H,
        watch: &mut CallWatch<'_>,
        mut first: Option<Read>,
    ) -> Result<Ended<H::Error>, Broken> {
        // The first exception raised by an event handler (e.g. ComfyUI's progress hook on an
        // interrupt) is raised once the reply is in: the lane stays in step either way.
        let mut deferred: Option<H::Error> = None;
        let lane = self.lane;
        let reply = loop {
            // Bookkeeping frames (releases, segments) are absorbed by the lane; what comes
            // out is the answer or an event, and only one call is in flight.
            let got = match first.take() {
                Some(read) => read,
                None => host.blocking(|| lane.recv_within(TICK)),
            };
            match got {
                Err(e) if is_timeout(&e) => watch.tick(self.process, || host.interrupted()),
                Ok(Some(Message::Event { id, topic, payload })) => {
                    self.event(host, watch, id, topic, payload, &mut deferred)?;
                }
                Ok(Some(Message::Ask { id, question })) => self.ask(host, watch, id, question)?,
                Ok(Some(Message::Notice { id, notice })) => {
                    if self.current(id, "a notice")? {
                        let handled = host.notice(notice);
                        self.defer(watch, handled, &mut deferred);
                    }
                }
                Ok(Some(m @ (Message::Reply { .. } | Message::Error { .. }))) => break m,
                Ok(Some(other)) => {
                    return Err(self.refuse(format!(
                        "unexpected {} on the {} lane",
                        other.kind(),
                        self.lane.label()
                    )));
                }
                Ok(None) => return Err(Broken::Lane(LaneError::Closed)),
                Err(e) => return Err(Broken::Lane(e)),
            }
        };
        let (rid, ended) = match reply {
            Message::Reply { id, value } => (id, Ended::Replied { value, deferred }),
            Message::Error { id, error } => (id, Ended::Raised { error, deferred }),
            _ => unreachable!("only replies and errors leave the loop"),
        };
        if rid != self.id {
            return Err(self.refuse(format!("a reply for call {rid}, not {}", self.id)));
        }
        Ok(ended)
    }

    /// Whether a message of call `id` is the running call's (false: a straggler of an
    /// earlier call, dropped); one of a call never made is refused.
    fn current(&self, id: u64, what: &str) -> Result<bool, Broken> {
        if id > self.id || id == 0 {
            return Err(self.refuse(format!("{what} for call {id}, never made")));
        }
        Ok(id == self.id)
    }

    /// An event of the running call: a question is answered on the lane, anything else goes
    /// to the host's handler.
    fn event<H: CallHost>(
        &self,
        host: &mut H,
        watch: &mut CallWatch<'_>,
        id: u64,
        topic: String,
        payload: Value,
        deferred: &mut Option<H::Error>,
    ) -> Result<(), Broken> {
        let current = self.current(id, "an event")?;
        // Decoded even for a straggler, so its regions are released (and checked).
        let decoded = host.decode(payload);
        if decoded.is_err() && self.lane.refusal().is_some() {
            return Err(Broken::Refused);
        }
        if !current {
            return Ok(());
        }
        if topic.ends_with('?') {
            // A question: the worker's node waits for the answer on this lane.
            let payload = host.answer(&topic, decoded);
            let msg = Message::Event { id, topic, payload };
            return self.send(host, watch, &msg).map_err(Broken::Lane);
        }
        let handled = decoded.and_then(|p| host.event(topic, p));
        self.defer(watch, handled, deferred);
        Ok(())
    }

    /// A memory question of the running call (e.g. admission before a load): the worker's
    /// node waits for the answer on this lane.
    fn ask<H: CallHost>(
        &self,
        host: &mut H,
        watch: &mut CallWatch<'_>,
        id: u64,
        question: Question,
    ) -> Result<(), Broken> {
        if !self.current(id, "a question")? {
            return Ok(());
        }
        let answer = host.ask(question);
        self.send(host, watch, &Message::Answer { id, answer })
            .map_err(Broken::Lane)
    }

    /// Keeps the first error of a handler; the worker need not finish a call whose caller
    /// will raise.
    fn defer<E>(
        &self,
        watch: &mut CallWatch<'_>,
        handled: Result<(), E>,
        deferred: &mut Option<E>,
    ) {
        if let Err(e) = handled
            && deferred.is_none()
        {
            watch.stop(self.process, Cause::Interrupted);
            *deferred = Some(e);
        }
    }

    /// Refuses what the worker sent (counted once, the worker ended).
    fn refuse(&self, why: String) -> Broken {
        Broken::Lane(self.lane.refuse(LaneError::Protocol(why)))
    }
}

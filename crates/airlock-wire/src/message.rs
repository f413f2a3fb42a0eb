//! The messages of both lanes.

use serde::{Deserialize, Deserializer, Serialize};

use crate::handshake::Hello;
use crate::limits::MAX_RELEASES;
use crate::memory::{Answer, ModelOp, ModelOutcome, Notice, Question, Setting, WorkerReport};
use crate::value::Value;

/// Which process created a shared-memory segment. Segment ids are per side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Side {
    Host,
    Worker,
}

/// A byte range of one segment: where a tensor's bytes lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Region {
    pub side: Side,
    pub segment: u32,
    pub offset: u64,
    pub len: u64,
}

/// An exception raised in the worker, as the host needs it to re-raise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteException {
    /// `type(exc).__module__`, e.g. `builtins` or `torch`.
    pub module: String,
    /// `type(exc).__qualname__`.
    pub qualname: String,
    /// `str(exc)`.
    pub message: String,
    /// `exc.args` when they are plain values, else empty.
    pub args: Value,
    /// The worker's formatted traceback.
    pub traceback: String,
}

/// One frame's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Message {
    /// Worker → host, first frame of each lane.
    Hello(Hello),
    /// Host → worker: the hello was accepted.
    Welcome {
        generation: u64,
        name: String,
    },
    /// Host → worker: the hello was refused, and why.
    Reject {
        reason: String,
    },
    /// Run `target` (`"module:qualname"`) with these arguments.
    Call {
        id: u64,
        target: String,
        args: Value,
        kwargs: Value,
    },
    /// The call `id` returned `value`.
    Reply {
        id: u64,
        value: Value,
    },
    /// The call `id` raised.
    Error {
        id: u64,
        error: RemoteException,
    },
    /// The sender created segment `id` of `len` bytes; its fd rides on this frame (SCM_RIGHTS).
    Segment {
        id: u32,
        len: u64,
    },
    /// The sender will never reference segment `id` again; the receiver drops its mapping.
    Retire {
        id: u32,
    },
    /// The sender no longer holds these regions (one entry per reference it was given).
    Release {
        #[serde(deserialize_with = "bounded_releases")]
        regions: Vec<Region>,
    },
    Ping {
        seq: u64,
    },
    Pong {
        seq: u64,
    },
    /// Finish what is running, then exit.
    Shutdown,
    /// Worker → host, while call `id` runs: something the host's UI should know now (progress,
    /// a preview, a `send_sync` message), or, when `topic` ends in `?`, a question: the worker
    /// then waits for the host's `Event` of the same id and topic carrying the answer (the
    /// memory questions have their own typed [`Message::Ask`]).
    ///
    /// Host → worker: the answer to such a question.
    Event {
        id: u64,
        topic: String,
        payload: Value,
    },
    /// Host → worker, control lane: run `op` on model `model` of generation `generation`. A
    /// worker of another generation refuses it, so a command never reaches a respawned
    /// worker's models. Answered by [`Message::CommandDone`].
    Model {
        seq: u64,
        generation: u64,
        model: u64,
        op: ModelOp,
    },
    /// Worker → host, control lane: the answer to `Model { seq }` or `Set { seq }`, with the
    /// worker's memory report taken after it (`None`: it has none).
    CommandDone {
        seq: u64,
        outcome: ModelOutcome,
        report: Option<WorkerReport>,
    },
    /// Host → worker, control lane: the latest memory report, please (idle workers too).
    Heartbeat {
        seq: u64,
    },
    /// Worker → host, control lane: the answer to `Heartbeat { seq }`, answered without the
    /// worker's Python thread from the report it last published (`None`: none yet).
    Report {
        seq: u64,
        report: Option<WorkerReport>,
    },
    // New variants go last: a variant's index is its encoding (postcard), and the fault tests
    // write some frames by hand (tests/faults/worker_side/forgeries.py).
    /// Worker → host, call lane, while call `id` runs: a memory question; the worker waits for
    /// the [`Message::Answer`] of the same id.
    Ask {
        id: u64,
        question: Question,
    },
    /// Host → worker, call lane: the answer to the running call's [`Message::Ask`].
    Answer {
        id: u64,
        answer: Answer,
    },
    /// Worker → host, call lane, while call `id` runs: memory news; nothing answers it.
    Notice {
        id: u64,
        notice: Notice,
    },
    /// Host → worker, control lane: a worker-wide memory setting, for generation `generation`
    /// only (as [`Message::Model`]). Answered by [`Message::CommandDone`].
    Set {
        seq: u64,
        generation: u64,
        setting: Setting,
    },
}

impl Message {
    /// The values this message carries (what can break a value limit).
    pub fn values(&self) -> Vec<&Value> {
        match self {
            Message::Call { args, kwargs, .. } => vec![args, kwargs],
            Message::Reply { value, .. } => vec![value],
            Message::Error { error, .. } => vec![&error.args],
            Message::Event { payload, .. } => vec![payload],
            _ => Vec::new(),
        }
    }

    /// The variant's name, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Hello(_) => "Hello",
            Message::Welcome { .. } => "Welcome",
            Message::Reject { .. } => "Reject",
            Message::Call { .. } => "Call",
            Message::Reply { .. } => "Reply",
            Message::Error { .. } => "Error",
            Message::Segment { .. } => "Segment",
            Message::Retire { .. } => "Retire",
            Message::Release { .. } => "Release",
            Message::Ping { .. } => "Ping",
            Message::Pong { .. } => "Pong",
            Message::Shutdown => "Shutdown",
            Message::Event { .. } => "Event",
            Message::Model { .. } => "Model",
            Message::CommandDone { .. } => "CommandDone",
            Message::Heartbeat { .. } => "Heartbeat",
            Message::Report { .. } => "Report",
            Message::Ask { .. } => "Ask",
            Message::Answer { .. } => "Answer",
            Message::Notice { .. } => "Notice",
            Message::Set { .. } => "Set",
        }
    }
}

fn bounded_releases<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Region>, D::Error> {
    crate::value::bounded_vec(d, MAX_RELEASES, "regions in one release")
}

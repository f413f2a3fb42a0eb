//! The messages of both lanes.

use serde::{Deserialize, Deserializer, Serialize};

use crate::handshake::Hello;
use crate::limits::MAX_RELEASES;
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

/// What the host asks of one worker model, on the control lane. Named after the stand-in
/// methods upstream ComfyUI calls, whose arguments they carry unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum ModelOp {
    /// `detach(unpatch_all=True)`: unload it entirely.
    Unload,
    /// `partially_unload(_, bytes)`: free about this many bytes of its residency.
    PartiallyUnload { bytes: u64 },
    /// `partially_load(_, extra)`: `1e32` everything, `0.1` almost nothing, a byte budget, or
    /// a negative amount to shrink by.
    PartiallyLoad { extra: f64 },
    /// Not a model: the worker's share of the host's pin budget, its own
    /// `MAX_PINNED_MEMORY`; it frees registrations down to it (the model id is unused).
    PinCeiling { bytes: u64 },
    /// Not a model: the host's RAM cache headroom (`RAM_CACHE_HEADROOM`), which sets the
    /// floor of available RAM the worker's own pin budget keeps (the model id is unused).
    CacheHeadroom { bytes: u64 },
}

/// How a worker answered a [`ModelOp`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ModelOutcome {
    /// Done: `bytes` freed (unloads) or newly resident (loads), measured after the fact.
    Done { bytes: u64 },
    /// Not done, and why (another generation, an unknown model, one the running node uses).
    Refused { reason: String },
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
    /// a preview, a `send_sync` message). Fire and forget: the worker never waits for an
    /// answer, so an event cannot deadlock a call.
    Event {
        id: u64,
        topic: String,
        payload: Value,
    },
    /// Host → worker, control lane: run `op` on model `model` of generation `generation`. A
    /// worker of another generation refuses it, so a command never reaches a respawned
    /// worker's models.
    Model {
        seq: u64,
        generation: u64,
        model: u64,
        op: ModelOp,
    },
    /// Worker → host, control lane: the answer to `Model { seq }`, with the worker's memory
    /// report taken after it.
    ModelDone {
        seq: u64,
        outcome: ModelOutcome,
        report: Value,
    },
    /// Host → worker, control lane: the latest memory report, please (idle workers too).
    Heartbeat {
        seq: u64,
    },
    /// Worker → host, control lane: the answer to `Heartbeat { seq }`, answered without the
    /// worker's Python thread from the report it last published.
    Report {
        seq: u64,
        report: Value,
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
            Message::ModelDone { report, .. } | Message::Report { report, .. } => vec![report],
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
            Message::ModelDone { .. } => "ModelDone",
            Message::Heartbeat { .. } => "Heartbeat",
            Message::Report { .. } => "Report",
        }
    }
}

fn bounded_releases<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Region>, D::Error> {
    crate::value::bounded_vec(d, MAX_RELEASES, "regions in one release")
}

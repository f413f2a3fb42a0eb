//! The memory protocol's messages, typed: what a worker reports it holds, what it asks the host
//! before and after a load, the host's answer, and the commands the host sends back.
//!
//! These used to cross as [`Value`](crate::Value) dicts under string topics (`"admit?"`,
//! `"oom?"`, `"loaded"`, `"telemetry"`), which any Python dict could fill. Typed, a peer can
//! only send what the protocol names: no tensor, no blob, no nesting, every list bounded (see
//! [`limits::MAX_MEMORY_ITEMS`]). The Python binding converts at its edge, so the Python code
//! still sees the dicts it saw before (ADR 0020).
//!
//! Which lane carries what:
//! - call lane, while a call runs: [`Question`] (worker → host, the worker waits for the
//!   [`Answer`]) and [`Notice`] (worker → host, no answer);
//! - control lane, any time: [`ModelOp`] on one model and [`Setting`] for the whole worker
//!   (host → worker), answered with a [`ModelOutcome`] and the [`WorkerReport`] taken after it;
//!   heartbeats are answered with the latest report.

use serde::{Deserialize, Deserializer, Serialize};

use crate::limits::MAX_MEMORY_ITEMS;
use crate::value::bounded_vec;

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
}

/// A worker-wide memory setting the host hands down (host RAM, `host/ram.py`), on the
/// control lane: not about any one model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Setting {
    /// The worker's share of the host's pin budget, its own `MAX_PINNED_MEMORY`; it frees
    /// registrations down to it.
    PinCeiling { bytes: u64 },
    /// The host's RAM cache headroom (`RAM_CACHE_HEADROOM`), which sets the floor of available
    /// RAM the worker's own pin budget keeps.
    CacheHeadroom { bytes: u64 },
}

/// How a worker answered a [`ModelOp`] or a [`Setting`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ModelOutcome {
    /// Done: `bytes` freed (unloads) or newly resident (loads), measured after the fact.
    Done { bytes: u64 },
    /// Not done, and why (another generation, an unknown model, one the running node uses).
    Refused { reason: String },
}

/// Which registry of the worker a model row comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ModelKind {
    /// A `ModelPatcher` in the worker's own `comfy.model_management.current_loaded_models`.
    Patcher,
    /// A torch module the pack registered itself (`comfy_airlock.worker.models`).
    Module,
}

/// One model a worker holds, as its report lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRow {
    /// The worker's id for the model, stable for the model's life in that process.
    pub id: u64,
    /// A display name (the model's class).
    pub name: String,
    pub kind: ModelKind,
    /// The device it loads to, as torch spells it (`cuda:0`, `cpu`).
    pub device: String,
    /// Bytes of the whole model.
    pub size: u64,
    /// Bytes of it on `device` now.
    pub resident: u64,
    /// Bumped whenever `size` or `resident` changed, from the same counter as the report's.
    pub seq: u64,
    /// When a node last used it (`time.time()`; 0 for never).
    pub last_used: f64,
    /// A node running now uses it: the worker would refuse to unload it.
    pub in_use: bool,
}

/// What a worker holds, as it reports it: with a call's reply when it changed, on every
/// heartbeat (from its control thread, without its Python), and after every command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerReport {
    /// The worker's pid.
    pub pid: u32,
    /// Increases with every report: the host ignores one older than what it has.
    pub seq: u64,
    /// `torch.cuda.memory_reserved()`: bytes torch's caching allocator holds (0 without CUDA).
    pub reserved: u64,
    #[serde(deserialize_with = "bounded_rows")]
    pub models: Vec<ModelRow>,
    /// Host RAM this worker's ComfyUI has page-locked (upstream's `TOTAL_PINNED_MEMORY`).
    pub pinned: u64,
    /// The worker's resident set in bytes; `None` where `/proc` cannot say.
    pub rss: Option<u64>,
    /// Device memory no model accounts for (CUDA context, kernels), measured once; `None`
    /// before it could be.
    pub floor: Option<u64>,
    /// The card the worker means by its CUDA device, in NVML's spelling; `None` before it has
    /// one. The host checks that it is its own.
    pub device_uuid: Option<String>,
}

/// A load a running node is about to make, as its worker describes it to the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadRequest {
    /// The device, as torch spells it (`cuda:0`).
    pub device: String,
    /// Bytes upstream's `load_models_gpu` wants free for it.
    pub need: u64,
    /// The least it can run with (upstream's minimum memory).
    pub minimum: u64,
    /// The worker's ids of the models being loaded: in use, whatever the last report said.
    #[serde(deserialize_with = "bounded_ids")]
    pub models: Vec<u64>,
}

/// A question from a running call, on the call lane; the worker waits for the [`Answer`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Question {
    /// Before a load: make room for it across every process on the card.
    Admit(LoadRequest),
    /// The load ran out of memory anyway: make room again; the worker retries once.
    Oom(LoadRequest),
}

/// The host's decision on a [`Question`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admission {
    /// Whether there is room for the load now.
    pub granted: bool,
    /// The hold a granted admission keeps on `need` bytes until the worker says the load is
    /// done ([`Notice::Loaded`]) or its call ends; `None` when not granted.
    pub hold: Option<u64>,
    /// The bytes asked for.
    pub need: u64,
    /// The device's true free memory before anything was freed.
    pub free_before: u64,
    /// Bytes earlier admissions held when this one was decided.
    pub held: u64,
    /// The device's true free memory after the decision.
    pub free: u64,
}

/// The host's answer to a [`Question`], on the call lane.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    Decided(Admission),
    /// The host could not decide (no memory bridge, or its handler failed), and why: the
    /// worker raises it and loads as upstream would.
    Unanswered {
        reason: String,
    },
}

/// News from a running call, on the call lane; nothing answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Notice {
    /// The admitted load is done (or failed): its holds can go at once.
    Loaded {
        #[serde(deserialize_with = "bounded_ids")]
        holds: Vec<u64>,
    },
    /// What the worker holds after a call that changed it.
    Telemetry(WorkerReport),
}

fn bounded_rows<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ModelRow>, D::Error> {
    bounded_vec(d, MAX_MEMORY_ITEMS, "models in one report")
}

fn bounded_ids<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
    bounded_vec(d, MAX_MEMORY_ITEMS, "ids in one memory message")
}

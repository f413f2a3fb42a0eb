//! Worker processes for comfy-airlock, and the lanes that connect them to the host.
//!
//! The host spawns each worker from any Python interpreter with our runtime on its path. The
//! worker connects back four times through a socket in a private 0700 directory that exists
//! only for the handshake: for the **call lane** (calls, replies, segment announcements and
//! lease releases), the **control lane** (heartbeats and commands that must reach a worker
//! while it is busy), the **route lane** (a second call lane, for the pack's HTTP requests,
//! so they are answered while a node runs: ADR 0055) and the **events lane** (UI messages the
//! pack sends while no call runs, read by a host thread: ADR 0056). Each connection is checked three ways: the peer's credentials
//! (same uid, the pid we spawned), a per-spawn token handed over an inherited pipe, and the
//! protocol version.
//!
//! The two call loops live here too, behind small traits for what only the host's or the
//! worker's language can do: the host's side of one call ([`exchange`], [`CallHost`]) and the
//! worker's loop over calls ([`serve`], [`Runner`]).
//!
//! Crash detection does not poll: a reaper thread waits on the worker's pidfd and, when it
//! exits, shuts our ends of its sockets, so a caller blocked on a reply wakes at once with an
//! error that names the worker, its exit status and the last lines of its stderr.

mod accept;
mod call_watch;
mod connect;
mod control;
mod error;
mod escalation;
mod events;
mod exec;
mod exit;
mod framed;
mod guard;
mod lane;
mod launch;
mod liveness;
mod mailbox;
mod outbox;
mod output;
mod private_tmp;
mod process;
mod rejections;
mod serve;
mod session;
mod shm_state;
mod signal_page;
mod spawn;
mod spin;

pub use call_watch::{CallWatch, Cause, TICK};
pub use connect::{
    Connected, WorkerIdentity, abandon_handshake, connect, forbid_same_user_access,
    kill_forked_children,
};
pub use control::{CommandResult, ControlState, ModelHandler};
pub use error::{LaneError, SpawnError, WorkerDied};
pub use escalation::{Escalation, InterruptPolicy, Step};
pub use events::{UI_TOPICS, read_events};
pub use exit::ExitDescription;
pub use lane::{Birth, CallLane, ControlLane, LaneStats};
pub use liveness::Liveness;
pub use output::{OutputSink, Stream};
pub use process::WorkerProcess;
pub use rejections::{Rejection, rejections};
pub use serve::{AskError, CallState, Runner, ServeError, ask, await_answer, serve};
pub use session::{Broken, CallHost, Ended, exchange, exchange_on};
pub use signal_page::{SIGNAL_FD, SIGNAL_FD_ENV, SignalPage};
pub use spawn::WorkerSpec;
pub use spin::{LaneTiming, monotonic_ns};

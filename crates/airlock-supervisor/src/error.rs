use std::io;

use airlock_shm::ShmError;
use airlock_wire::{HandshakeError, WireError};
use thiserror::Error;

use crate::exit::ExitDescription;

/// Failure of one lane: I/O, a corrupt frame or a protocol violation by the peer.
#[derive(Debug, Error)]
pub enum LaneError {
    #[error("connection lost: {0}")]
    Io(#[from] io::Error),
    #[error("corrupt frame: {0}")]
    Wire(#[from] WireError),
    #[error("protocol violation: {0}")]
    Protocol(String),
    #[error("shared memory: {0}")]
    Shm(#[from] ShmError),
    #[error("the peer closed the connection")]
    Closed,
    /// The connection refused the peer's input earlier (this says what) and takes no more.
    #[error("closed after refusing the peer's input: {0}")]
    Ended(String),
}

/// Why a worker could not be started.
#[derive(Debug, Error)]
pub enum SpawnError {
    #[error("cannot prepare the private socket directory: {0}")]
    SocketDir(io::Error),
    #[error("cannot create the worker's private temp directory: {0}")]
    TmpDir(io::Error),
    #[error("cannot start `{python}`: {source}")]
    Exec { python: String, source: io::Error },
    #[error("worker exited before connecting ({status}){}", tail_text(.stderr_tail))]
    ExitedEarly {
        status: ExitDescription,
        stderr_tail: Vec<String>,
    },
    #[error("worker did not connect within {secs:.1} s{}", tail_text(.stderr_tail))]
    Timeout { secs: f64, stderr_tail: Vec<String> },
    #[error("handshake refused: {0}")]
    Handshake(#[from] HandshakeError),
    #[error(
        "connection from uid {uid} pid {pid} refused: not the worker we started (pid {expected})"
    )]
    ForeignPeer { uid: u32, pid: i32, expected: i32 },
    #[error("handshake failed: {0}")]
    Lane(#[from] LaneError),
}

/// A worker died while the host was waiting on it.
#[derive(Debug, Error, Clone)]
#[error(
    "worker '{name}' (pid {pid}, generation {generation}) died during {during}: {status}{}{}",
    verdict_text(.verdict),
    tail_text(.stderr_tail)
)]
pub struct WorkerDied {
    pub name: String,
    pub pid: i32,
    pub generation: u64,
    pub during: String,
    pub status: ExitDescription,
    /// Why the supervisor killed it, when it did (e.g. "declared hung: …").
    pub verdict: Option<String>,
    pub stderr_tail: Vec<String>,
}

fn verdict_text(verdict: &Option<String>) -> String {
    verdict
        .as_ref()
        .map(|v| format!(" ({v})"))
        .unwrap_or_default()
}

fn tail_text(lines: &[String]) -> String {
    if lines.is_empty() {
        return String::new();
    }
    let mut s = String::from("\nlast lines of its stderr:");
    for l in lines {
        s.push_str("\n    ");
        s.push_str(l);
    }
    s
}

//! The worker's side of the handshake, and its control-lane thread.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use airlock_shm::PoolConfig;
use airlock_wire::{Hello, Lane, Message, PROTOCOL_VERSION, Side, Token};

use crate::control::{Command, ControlState};
use crate::error::LaneError;
use crate::framed::{Framed, recv_one};
use crate::lane::{CallLane, ControlLane};

/// What a worker reports about itself in its [`Hello`].
#[derive(Debug, Clone)]
pub struct WorkerIdentity {
    pub python: String,
    pub torch: Option<String>,
    pub numpy: Option<String>,
}

/// Makes this process non-dumpable (`PR_SET_DUMPABLE` 0), so that another process of the same
/// user (a sibling worker) can neither take this worker's descriptors with `pidfd_getfd` nor
/// `ptrace` it, nor read its `/proc/<pid>/fd`, `environ`, `maps` or `mem`; only a process with
/// `CAP_SYS_PTRACE` (root) still can. An exec resets it, so the worker sets it itself, first
/// thing in its runtime and again here before its lanes exist. No core dumps are written.
pub fn forbid_same_user_access() -> std::io::Result<()> {
    Ok(rustix::process::set_dumpable_behavior(
        rustix::process::DumpableBehavior::NotDumpable,
    )?)
}

/// A worker's connection to its host, as [`connect`] leaves it.
pub struct Connected {
    /// Node calls and everything else the host asks, one at a time.
    pub call: Arc<CallLane>,
    /// The pack's HTTP requests, on a thread of their own (ADR 0055).
    pub route: Arc<CallLane>,
    /// UI messages sent while no call runs, which nothing here reads (ADR 0056).
    pub events: Arc<CallLane>,
    /// What the control thread answers with, and the generation the host gave this worker.
    pub control: Arc<ControlState>,
    /// The worker's name.
    pub name: String,
}

/// Connects the four lanes to the host at `socket`, and starts the control-lane thread,
/// which answers heartbeats without Python and calls `host_gone` when the host disappears (the
/// worker runtime passes a function that exits the process at once). `pool` configures the
/// call lane's pool; the route and events lanes' are named after it.
pub fn connect(
    socket: &Path,
    token: Token,
    id: &WorkerIdentity,
    pool: PoolConfig,
    host_gone: fn(),
) -> Result<Connected, LaneError> {
    // Before the lanes exist: no sibling may ever take them.
    forbid_same_user_access()?;
    let open = |lane: Lane| -> Result<Framed, LaneError> {
        let framed = Framed::new(UnixStream::connect(socket)?);
        framed.send_one(&Message::Hello(Hello {
            protocol: PROTOCOL_VERSION,
            token,
            lane,
            pid: std::process::id(),
            python: id.python.clone(),
            torch: id.torch.clone(),
            numpy: id.numpy.clone(),
        }))?;
        Ok(framed)
    };
    let welcome = |framed: &Framed| -> Result<(u64, String), LaneError> {
        match recv_one(framed, None)? {
            Message::Welcome { generation, name } => Ok((generation, name)),
            Message::Reject { reason } => Err(LaneError::Protocol(format!(
                "the host refused this worker: {reason}"
            ))),
            _ => Err(LaneError::Protocol("expected Welcome".into())),
        }
    };
    // Every hello goes out before any welcome is awaited: the host welcomes a worker only
    // once all of its lanes are in.
    let handshake = || -> Result<_, LaneError> {
        let call = open(Lane::Call)?;
        let control = open(Lane::Control)?;
        let route = open(Lane::Route)?;
        let events = open(Lane::Events)?;
        let (generation, name) = welcome(&call)?;
        welcome(&control)?;
        welcome(&route)?;
        welcome(&events)?;
        Ok((call, control, route, events, generation, name))
    };
    let (call, control, route, events, generation, name) = handshake().inspect_err(|e| {
        if host_may_be_gone(e) {
            abandon_handshake(socket);
        }
    })?;
    let control = ControlLane::from_framed(control);
    let state = Arc::new(ControlState::new(generation));
    let served = state.clone();
    let _ = PRIVATE_TMP.set(private_tmp());
    std::thread::Builder::new()
        .name("airlock-control".into())
        .spawn(move || serve_control(control, &served, host_gone))?;
    let route_pool = crate::lane::side_pool(&pool, "route");
    let events_pool = crate::lane::side_pool(&pool, "events");
    Ok(Connected {
        call: Arc::new(CallLane::from_framed(call, Side::Worker, pool)),
        route: Arc::new(CallLane::from_framed(route, Side::Worker, route_pool)),
        events: Arc::new(CallLane::from_framed(events, Side::Worker, events_pool)),
        control: state,
        name,
    })
}

/// For a worker whose handshake cannot happen because the host may have gone (the socket
/// refused us or closed, or the token never came): if the host died, its socket directory,
/// which only the host removes, would outlive it. The directory is named
/// `airlock-<host pid>-<random>`, and the host starts its workers directly, so the host is
/// gone exactly when that pid is no longer our parent. A killed process closes its descriptors
/// (our connect fails) a moment before the kernel reparents its children, so this waits up to
/// [`REPARENT_WAIT`] for that; if the host is still our parent then, it is alive and removes
/// its own directory.
pub fn abandon_handshake(socket: &Path) {
    let Some(dir) = socket.parent() else {
        return;
    };
    let Some(host) = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("airlock-"))
        .and_then(|rest| rest.split('-').next())
        .and_then(|pid| pid.parse::<i32>().ok())
    else {
        return;
    };
    let deadline = Instant::now() + REPARENT_WAIT;
    while rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get()) == host {
        if Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = std::fs::remove_file(socket);
    let _ = std::fs::remove_dir(dir);
}

/// How long [`abandon_handshake`] waits for a dying host to let go of its children.
pub const REPARENT_WAIT: Duration = Duration::from_secs(2);

/// Whether a failed handshake may mean the host is gone (rather than that it refused us).
fn host_may_be_gone(e: &LaneError) -> bool {
    matches!(e, LaneError::Io(_) | LaneError::Closed)
}

/// This worker's private temp dir, found at [`connect`].
static PRIVATE_TMP: OnceLock<Option<PathBuf>> = OnceLock::new();

/// This worker's private temp dir: `TMPDIR` as the host set it, named `airlock-tmp-<host
/// pid>-…` (the host is our parent). Read before the pack runs, which may change `TMPDIR`.
fn private_tmp() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("TMPDIR")?);
    let host = rustix::process::getppid()?.as_raw_nonzero().get();
    let name = dir.file_name()?.to_str()?;
    name.starts_with(&format!("airlock-tmp-{host}-"))
        .then_some(dir)
}

fn serve_control(control: ControlLane, state: &ControlState, host_gone: fn()) {
    loop {
        let answer = match control.recv() {
            Ok(Some(Message::Ping { seq })) => Message::Pong { seq },
            Ok(Some(Message::Heartbeat { seq })) => Message::Report {
                seq,
                report: state.report(),
            },
            Ok(Some(Message::Model {
                seq,
                generation,
                model,
                op,
            })) => done(seq, state.run(generation, Command::Model(model, op))),
            Ok(Some(Message::Set {
                seq,
                generation,
                setting,
            })) => done(seq, state.run(generation, Command::Set(setting))),
            Ok(Some(_)) => continue,
            Ok(None) | Err(_) => break,
        };
        if control.send(&answer).is_err() {
            break;
        }
    }
    kill_forked_children();
    host_gone();
}

fn done(seq: u64, (outcome, report): crate::control::CommandResult) -> Message {
    Message::CommandDone {
        seq,
        outcome,
        report,
    }
}

/// The host is gone, so nobody will kill this worker's process group: what the pack forked
/// (a lingering helper, a pool worker) is killed here, before we exit. Only when this process
/// leads its own group, as the host's spawn arranges; a worker started some other way never
/// signals a group it does not own. The signal reaches us too, which ends us as surely as
/// `host_gone` would. The control thread calls it when its lane ends; a worker's call loop
/// that finds the host gone first should call it too.
///
/// A host that was killed (SIGTERM, SIGKILL) removes nothing, so this worker's private temp dir
/// goes first, whichever thread notices. (Under a sandbox that may not remove it from its
/// parent, its contents go; the host's next spawn sweeps the empty directory.)
pub fn kill_forked_children() {
    if let Some(Some(dir)) = PRIVATE_TMP.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
    let me = rustix::process::getpid();
    if rustix::process::getpgrp() == me {
        let _ = rustix::process::kill_process_group(me, rustix::process::Signal::KILL);
    }
}

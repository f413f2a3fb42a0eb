//! The worker's side of the handshake, and its control-lane thread.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;

use airlock_shm::PoolConfig;
use airlock_wire::{Hello, Lane, Message, PROTOCOL_VERSION, Side, Token};

use crate::control::ControlState;
use crate::error::LaneError;
use crate::lane::{CallLane, ControlLane, Framed, recv_one};

/// What a worker reports about itself in its [`Hello`].
#[derive(Debug, Clone)]
pub struct WorkerIdentity {
    pub python: String,
    pub torch: Option<String>,
    pub numpy: Option<String>,
}

/// Connects both lanes to the host at `socket`, and starts the control-lane thread, which
/// answers heartbeats without Python and calls `host_gone` when the host disappears (the
/// worker runtime passes a function that exits the process at once).
///
/// Returns the call lane, the control state (holding the generation the host gave this
/// worker) and the worker's name.
pub fn connect(
    socket: &Path,
    token: Token,
    id: &WorkerIdentity,
    pool: PoolConfig,
    host_gone: fn(),
) -> Result<(Arc<CallLane>, Arc<ControlState>, String), LaneError> {
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
        match recv_one(framed)? {
            Message::Welcome { generation, name } => Ok((generation, name)),
            Message::Reject { reason } => Err(LaneError::Protocol(format!(
                "the host refused this worker: {reason}"
            ))),
            _ => Err(LaneError::Protocol("expected Welcome".into())),
        }
    };
    // Both hellos go out before either welcome is awaited: the host welcomes a worker only
    // once both of its lanes are in.
    let call = open(Lane::Call)?;
    let control = open(Lane::Control)?;
    let (generation, name) = welcome(&call)?;
    welcome(&control)?;
    let control = ControlLane::from_framed(control);
    let state = Arc::new(ControlState::new(generation));
    let served = state.clone();
    std::thread::Builder::new()
        .name("airlock-control".into())
        .spawn(move || serve_control(control, &served, host_gone))?;
    Ok((
        Arc::new(CallLane::from_framed(call, Side::Worker, pool)),
        state,
        name,
    ))
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
            })) => {
                let (outcome, report) = state.run(generation, model, op);
                Message::ModelDone {
                    seq,
                    outcome,
                    report,
                }
            }
            Ok(Some(_)) => continue,
            Ok(None) | Err(_) => break,
        };
        if control.send(&answer).is_err() {
            break;
        }
    }
    host_gone();
}

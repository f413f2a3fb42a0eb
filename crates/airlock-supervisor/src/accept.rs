//! The host's side of the handshake: accepting the four lanes from the process it started.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use airlock_wire::{Hello, Lane, Message, Token};
use rustix::event::{PollFd, PollFlags};

use crate::error::{LaneError, SpawnError};
use crate::framed::{Framed, recv_one};
use crate::spawn::SocketDir;

pub(crate) enum Accept {
    Exited,
    Timeout,
    Failed(SpawnError),
}

impl From<SpawnError> for Accept {
    fn from(e: SpawnError) -> Self {
        Accept::Failed(e)
    }
}

/// A worker's lanes, as accepted.
pub(crate) struct Accepted {
    pub call: Framed,
    pub control: Framed,
    pub route: Framed,
    pub events: Framed,
    pub hello: Hello,
}

/// Accepts the call, control, route and events lanes, in any order, from the process we
/// spawned.
pub(crate) fn accept_lanes(
    sd: &SocketDir,
    pidfd: &OwnedFd,
    pid: i32,
    token: &Token,
    timeout: Duration,
) -> Result<Accepted, Accept> {
    let deadline = Instant::now() + timeout;
    let (mut call, mut control, mut route, mut events) = (None, None, None, None);
    let mut hello = None;
    while call.is_none() || control.is_none() || route.is_none() || events.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Accept::Timeout);
        }
        let ts = rustix::event::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: left.subsec_nanos() as i64,
        };
        let mut fds = [
            PollFd::new(&sd.listener, PollFlags::IN),
            PollFd::new(pidfd, PollFlags::IN),
        ];
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(SpawnError::SocketDir(e.into()).into()),
        }
        if !fds[1].revents().is_empty() {
            return Err(Accept::Exited);
        }
        let (sock, _) = match sd.listener.accept() {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(SpawnError::SocketDir(e).into()),
        };
        let (framed, h) = check_peer(sock, pid, token, left)?;
        let lane = h.lane;
        let slot = match lane {
            Lane::Call => &mut call,
            Lane::Control => &mut control,
            Lane::Route => &mut route,
            Lane::Events => &mut events,
        };
        if slot.is_some() {
            return Err(SpawnError::Lane(LaneError::Protocol(format!(
                "{lane:?} lane opened twice"
            )))
            .into());
        }
        *slot = Some(framed);
        hello.get_or_insert(h);
    }
    match (call, control, route, events, hello) {
        (Some(call), Some(control), Some(route), Some(events), Some(hello)) => Ok(Accepted {
            call,
            control,
            route,
            events,
            hello,
        }),
        _ => Err(Accept::Timeout),
    }
}

/// One connection to the socket: it must come from `pid` with our uid (SO_PEERCRED), and its
/// first frame must be a hello with our token and protocol version, claiming that pid.
fn check_peer(
    sock: UnixStream,
    pid: i32,
    token: &Token,
    left: Duration,
) -> Result<(Framed, Hello), Accept> {
    sock.set_nonblocking(false)
        .map_err(|e| SpawnError::Lane(e.into()))?;
    let cred = rustix::net::sockopt::socket_peercred(&sock)
        .map_err(|e| SpawnError::Lane(std::io::Error::from(e).into()))?;
    let (uid, peer_pid) = (cred.uid.as_raw(), cred.pid.as_raw_nonzero().get());
    if uid != rustix::process::getuid().as_raw() || peer_pid != pid {
        // Not the process we started: refuse loudly rather than talk to it.
        return Err(SpawnError::ForeignPeer {
            uid,
            pid: peer_pid,
            expected: pid,
        }
        .into());
    }
    let framed = Framed::new(sock);
    let wait = Some(left.max(Duration::from_millis(10)));
    let h = match recv_one(&framed, wait).map_err(SpawnError::Lane)? {
        Message::Hello(h) => h,
        other => {
            return Err(SpawnError::Lane(LaneError::Protocol(format!(
                "expected Hello, got {}",
                other.kind()
            )))
            .into());
        }
    };
    if let Err(e) = h.check(token, h.lane) {
        let _ = framed.send_one(&Message::Reject {
            reason: e.to_string(),
        });
        return Err(SpawnError::Handshake(e).into());
    }
    if h.pid as i32 != pid {
        let e = airlock_wire::HandshakeError::PidMismatch {
            claimed: h.pid,
            actual: pid as u32,
        };
        return Err(SpawnError::Handshake(e).into());
    }
    framed
        .set_read_timeout(None)
        .map_err(|e| SpawnError::Lane(e.into()))?;
    Ok((framed, h))
}

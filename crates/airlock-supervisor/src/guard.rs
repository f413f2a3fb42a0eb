//! One rule for input a worker sent that the host refuses: it is counted once, and the worker
//! is ended at once, never trusted with another call.
//!
//! Both lanes of a worker share one [`Guard`]. The first refusal on either lane is the
//! connection's refusal: it moves the counter of its reason, kills the worker's process group
//! (the reason becomes the worker's verdict, in the `WorkerDied` a waiting caller gets), and
//! closes both lanes for everything after it, so that a corrupt frame read again, or the
//! truncation our own kill causes, is not counted again.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{Pid, Signal};

use crate::error::LaneError;
use crate::liveness::Heard;
use crate::rejections::{self, Rejection};

/// The worker a guard ends.
struct Ender {
    pidfd: Arc<OwnedFd>,
    pid: i32,
    heard: Arc<Heard>,
}

pub(crate) struct Guard {
    first: Mutex<Option<String>>,
    end: Option<Ender>,
}

impl Guard {
    /// The guard of a host's worker: a refusal kills it.
    pub fn ending(pidfd: Arc<OwnedFd>, pid: i32, heard: Arc<Heard>) -> Arc<Guard> {
        Arc::new(Guard {
            first: Mutex::new(None),
            end: Some(Ender { pidfd, pid, heard }),
        })
    }

    /// What this connection refused first, if anything.
    pub fn refusal(&self) -> Option<String> {
        self.first.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Applies the rule to `e`, seen on `lane` ("call", "route" or "control"). Errors that are not the
    /// peer's doing pass; so does a stream cut inside a frame by a worker that died (a crash,
    /// not a refusal: the caller reports the death).
    pub fn refuse(&self, e: &LaneError, lane: &str) {
        let Some(reason) = rejections::of_lane(e) else {
            return;
        };
        if self.refusal().is_some() || (reason == Rejection::Truncated && self.peer_exited()) {
            return;
        }
        let text = e.to_string();
        {
            let mut first = self.first.lock().unwrap_or_else(|p| p.into_inner());
            if first.is_some() {
                return;
            }
            *first = Some(text.clone());
        }
        rejections::count(reason);
        if let Some(end) = &self.end {
            end.heard.set_verdict(format!(
                "ended by the host, which refused its input on the {lane} lane: {text}"
            ));
            let _ = rustix::process::pidfd_send_signal(end.pidfd.as_ref(), Signal::KILL);
            if let Some(p) = Pid::from_raw(end.pid) {
                let _ = rustix::process::kill_process_group(p, Signal::KILL);
            }
        }
    }

    /// The error for using a lane after its connection refused input.
    pub fn check(&self) -> Result<(), LaneError> {
        match self.refusal() {
            Some(r) => Err(LaneError::Ended(r)),
            None => Ok(()),
        }
    }

    /// Whether the worker has exited, waiting a moment: a killed process closes its sockets
    /// just before its pidfd says it is gone.
    fn peer_exited(&self) -> bool {
        let Some(end) = &self.end else {
            return false;
        };
        let ts = Timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        let mut fds = [PollFd::new(end.pidfd.as_ref(), PollFlags::IN)];
        loop {
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(n) => return n > 0,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return false,
            }
        }
    }
}

//! Is the worker still there, and what does it hold? One timer per worker: every interval its
//! control lane is asked for the worker's latest memory report (`Heartbeat`), which proves the
//! worker alive and is kept for the host's memory code to read (`WorkerProcess::last_report`),
//! so the host runs no second heartbeat of its own (ADR 0020, "One heartbeat").
//!
//! A blanket timeout on calls kills healthy nodes that simply run long (comfy-env kills any call
//! silent for 600 s). The control lane is answered by a thread of the worker's that never takes
//! the GIL, so a worker that is busy in a node still answers at once; one that does not answer
//! for the grace period is stopped, frozen, or broken below Python, and is replaced. Only the
//! process's own health is judged here; how long a node may run is the pack's call deadline.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_wire::{Message, WorkerReport};
use rustix::process::Signal;

use crate::lane::ControlLane;
use crate::process::ExitState;

/// How often the worker is asked for its report, and how long it may stay silent before it is
/// declared hung (`None`: never; the reports are still read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    pub interval: Duration,
    pub grace: Option<Duration>,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness {
            interval: Duration::from_secs(1),
            grace: Some(Duration::from_secs(30)),
        }
    }
}

/// When the worker was last heard on its control lane, the latest memory report it sent there,
/// and the verdict if it was declared hung.
#[derive(Debug)]
pub(crate) struct Heard {
    last: Mutex<Instant>,
    report: Mutex<Option<WorkerReport>>,
    verdict: Mutex<Option<String>>,
}

impl Heard {
    pub fn new() -> Self {
        Heard {
            last: Mutex::new(Instant::now()),
            report: Mutex::new(None),
            verdict: Mutex::new(None),
        }
    }

    pub fn now(&self) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// A frame from the control lane: the worker is alive, and the report a heartbeat's
    /// answer carries (what the worker last published) is kept unless a newer one already is:
    /// reports count up (`seq`), and a late answer to a timed-out request may carry an older
    /// one. Commands' answers carry reports of their own, which their callers hand on.
    pub fn frame(&self, m: &Message) {
        self.now();
        let Message::Report {
            report: Some(new), ..
        } = m
        else {
            return;
        };
        let mut kept = self.report.lock().unwrap_or_else(|p| p.into_inner());
        if kept.as_ref().is_none_or(|old| old.seq <= new.seq) {
            *kept = Some(new.clone());
        }
    }

    /// The latest report heard (None: none yet).
    pub fn report(&self) -> Option<WorkerReport> {
        self.report
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn silent_for(&self) -> Duration {
        self.last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    /// Records why the supervisor ends this worker; the first reason stays.
    pub fn set_verdict(&self, why: String) {
        self.verdict
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(why);
    }

    pub fn verdict(&self) -> Option<String> {
        self.verdict
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// What the watcher thread needs of the process.
pub(crate) struct Watched {
    pub name: String,
    pub control: Arc<ControlLane>,
    pub requests: Arc<Mutex<u64>>,
    pub exit: Arc<ExitState>,
    pub pidfd: Arc<OwnedFd>,
    pub pid: i32,
    pub heard: Arc<Heard>,
}

pub(crate) fn watch(w: Watched, cfg: Liveness) {
    let name = format!("airlock-live-{}", w.name);
    let _ = std::thread::Builder::new()
        .name(name)
        .spawn(move || run(&w, cfg));
}

fn run(w: &Watched, cfg: Liveness) {
    loop {
        if w.exit.wait(cfg.interval).is_some() {
            return;
        }
        match w.requests.try_lock() {
            Ok(mut seq) => {
                *seq += 1;
                // A worker that stops reading its control lane fills it: the request waits at
                // most an interval, and the silence counts against the grace as any other.
                match w
                    .control
                    .send_within(&Message::Heartbeat { seq: *seq }, cfg.interval)
                {
                    Ok(()) => {}
                    Err(e) if crate::framed::is_timeout(&e) => {}
                    Err(_) => return, // the lane is gone: the reaper reports the exit
                }
                // Any frame proves the control thread is alive; answers to requests that timed
                // out earlier are as good as this one (and their reports are kept by seq).
                match w.control.recv_timeout(cfg.interval) {
                    Ok(Some(m)) => w.heard.frame(&m),
                    Ok(None) => return,
                    Err(_) => {}
                }
            }
            // A model command or heartbeat is in flight; it has its own timeout, and its
            // answer is what we would wait for anyway.
            Err(_) => w.heard.now(),
        }
        let Some(grace) = cfg.grace else { continue };
        let silent = w.heard.silent_for();
        if silent >= grace {
            *w.heard.verdict.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!(
                "declared hung: no answer on its control lane for {:.1} s (grace {:.1} s)",
                silent.as_secs_f64(),
                grace.as_secs_f64()
            ));
            let _ = rustix::process::pidfd_send_signal(w.pidfd.as_ref(), Signal::KILL);
            if let Some(p) = rustix::process::Pid::from_raw(w.pid) {
                let _ = rustix::process::kill_process_group(p, Signal::KILL);
            }
            return;
        }
    }
}

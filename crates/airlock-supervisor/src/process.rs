//! One running worker: spawn, handshake, reaping, and shutdown.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use airlock_wire::{Hello, Message, ModelOp, Setting, Side, WorkerReport};

use crate::control::CommandResult;
use rustix::process::{Pid, Signal};

use crate::accept::{Accept, Accepted, accept_lanes};
use crate::error::{LaneError, SpawnError, WorkerDied};
use crate::exit::ExitDescription;
use crate::guard::Guard;
use crate::lane::{CallLane, ControlLane, side_pool};
use crate::launch::{Reaped, kill_now, launch, reap, start_reaper};
use crate::liveness::{Heard, Watched, watch};
use crate::output::{OutputSink, Tail};
use crate::signal_page::SignalPage;
use crate::spawn::WorkerSpec;

#[derive(Default)]
pub(crate) struct ExitState {
    pub(crate) status: Mutex<Option<ExitDescription>>,
    pub(crate) changed: Condvar,
}

impl ExitState {
    pub fn wait(&self, timeout: Duration) -> Option<ExitDescription> {
        let g = self.status.lock().unwrap_or_else(|p| p.into_inner());
        let (g, _) = self
            .changed
            .wait_timeout_while(g, timeout, |s| s.is_none())
            .unwrap_or_else(|p| p.into_inner());
        *g
    }
}

/// A started worker with its four lanes connected.
pub struct WorkerProcess {
    name: String,
    pid: i32,
    generation: u64,
    pidfd: Arc<OwnedFd>,
    call: Arc<CallLane>,
    /// The pack's HTTP requests, served by a thread of their own in the worker (ADR 0055).
    route: Arc<CallLane>,
    /// UI messages the worker sends while no call runs; the host reads it on a thread of its
    /// own (ADR 0056).
    events: Arc<CallLane>,
    control: Arc<ControlLane>,
    exit: Arc<ExitState>,
    stderr_tail: Arc<Tail>,
    hello: Hello,
    /// One control request in flight at a time, so that concurrent callers never take each
    /// other's answer; holds the last sequence number.
    requests: Arc<Mutex<u64>>,
    heard: Arc<Heard>,
    signal: Arc<SignalPage>,
}

impl WorkerProcess {
    /// Starts a worker and completes the handshake on its four lanes.
    pub fn spawn(
        spec: &WorkerSpec,
        generation: u64,
        sink: Arc<dyn OutputSink>,
    ) -> Result<WorkerProcess, SpawnError> {
        let l = launch(spec, sink)?;
        let (pid, pidfd) = (l.pid, l.pidfd.clone());
        let accepted = accept_lanes(&l.sockdir, &pidfd, pid, &l.token, spec.connect_timeout);
        drop(l.sockdir);
        let Accepted {
            call,
            control,
            route,
            events,
            hello,
        } = match accepted {
            Ok(lanes) => lanes,
            Err(e) => return Err(refused_start(spec, &pidfd, pid, &l.stderr_tail, e)),
        };
        let welcome = Message::Welcome {
            generation,
            name: spec.name.clone(),
        };
        let call = Arc::new(CallLane::from_framed(call, Side::Host, spec.pool.clone()));
        let route = Arc::new(CallLane::from_framed(
            route,
            Side::Host,
            side_pool(&spec.pool, "route"),
        ));
        let events = Arc::new(CallLane::from_framed(
            events,
            Side::Host,
            side_pool(&spec.pool, "events"),
        ));
        let signal = Arc::new(l.signal);
        call.attach_page(signal.clone());
        let control = Arc::new(ControlLane::from_framed(control));
        // Input refused on either lane ends this worker (guard.rs).
        let heard = Arc::new(Heard::new());
        let guard = Guard::ending(pidfd.clone(), pid, heard.clone());
        call.arm(guard.clone(), "call");
        route.arm(guard.clone(), "route");
        events.arm(guard.clone(), "events");
        control.arm(guard);
        let welcomed = control
            .send(&welcome)
            .and_then(|_| call.send(&welcome))
            .and_then(|_| route.send(&welcome))
            .and_then(|_| events.send(&welcome));
        if let Err(e) = welcomed {
            kill_now(&pidfd, pid);
            let _ = reap(&pidfd);
            return Err(SpawnError::Lane(e));
        }

        let exit = Arc::new(ExitState::default());
        let requests = Arc::new(Mutex::new(0));
        if let Some(cfg) = spec.liveness {
            watch(
                Watched {
                    name: spec.name.clone(),
                    control: control.clone(),
                    requests: requests.clone(),
                    exit: exit.clone(),
                    pidfd: pidfd.clone(),
                    pid,
                    heard: heard.clone(),
                },
                cfg,
            );
        }
        start_reaper(
            &spec.name,
            Reaped {
                pidfd: pidfd.clone(),
                exit: exit.clone(),
                call: call.clone(),
                route: route.clone(),
                events: events.clone(),
                control: control.clone(),
                tmp: l.tmp,
                pid,
            },
        );
        Ok(WorkerProcess {
            name: spec.name.clone(),
            pid,
            generation,
            pidfd,
            call,
            route,
            events,
            control,
            exit,
            stderr_tail: l.stderr_tail,
            hello,
            requests,
            heard,
            signal,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// What the worker said about itself (Python, torch and numpy versions).
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    pub fn call_lane(&self) -> &Arc<CallLane> {
        &self.call
    }

    /// The second call lane, whose calls the worker answers while the call lane's run.
    pub fn route_lane(&self) -> &Arc<CallLane> {
        &self.route
    }

    /// The lane of the worker's UI messages sent while no call runs (read, never called on).
    pub fn events_lane(&self) -> &Arc<CallLane> {
        &self.events
    }

    /// `None` while running.
    pub fn exit_status(&self) -> Option<ExitDescription> {
        *self.exit.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_alive(&self) -> bool {
        self.exit_status().is_none()
    }

    /// Waits up to `timeout` for the worker to exit.
    pub fn wait_exit(&self, timeout: Duration) -> Option<ExitDescription> {
        self.exit.wait(timeout)
    }

    /// Whether the worker has exited, waiting up to `timeout`. Asks the kernel (its pidfd
    /// turns readable when the process is gone) rather than the reaper thread, which records
    /// the exit only once it has run: on a loaded machine that can take longer than a caller
    /// that found its lane closed should wait to tell a death from a broken lane. The status
    /// itself comes from [`WorkerProcess::wait_exit`].
    pub fn exited_within(&self, timeout: Duration) -> bool {
        if self.exit_status().is_some() {
            return true;
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ts = rustix::event::Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: left.subsec_nanos() as i64,
            };
            let mut fds = [rustix::event::PollFd::new(
                self.pidfd.as_ref(),
                rustix::event::PollFlags::IN,
            )];
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(n) => return n > 0,
                Err(rustix::io::Errno::INTR) if !left.is_zero() => continue,
                Err(_) => return self.exit_status().is_some(),
            }
        }
    }

    /// Round trip on the control lane, answered by the worker without its Python thread, so it
    /// works while a call is running.
    pub fn ping(&self, timeout: Duration) -> Result<Duration, LaneError> {
        let start = Instant::now();
        self.request(|seq| Message::Ping { seq }, timeout)?;
        Ok(start.elapsed())
    }

    /// The worker's latest memory report, answered by its control thread from what it last
    /// published (so idle and busy workers alike answer at once).
    pub fn heartbeat(&self, timeout: Duration) -> Result<Option<WorkerReport>, LaneError> {
        match self.request(|seq| Message::Heartbeat { seq }, timeout)? {
            Message::Report { report, .. } => Ok(report),
            other => Err(self.control.refuse(unexpected(&other))),
        }
    }

    /// The worker's latest memory report as the last heartbeat on its control lane answered it
    /// (the liveness thread's, every interval, or [`WorkerProcess::heartbeat`]'s); None before
    /// the first. Reads no lane, so it costs nothing and never waits.
    pub fn last_report(&self) -> Option<WorkerReport> {
        self.heard.report()
    }

    /// Runs `op` on `model` in the worker, stamped with this process's generation, and
    /// returns its outcome and the worker's report taken after it.
    pub fn model_command(
        &self,
        model: u64,
        op: ModelOp,
        timeout: Duration,
    ) -> Result<CommandResult, LaneError> {
        let generation = self.generation;
        let msg = |seq| Message::Model {
            seq,
            generation,
            model,
            op,
        };
        self.command(msg, timeout)
    }

    /// Hands the worker a memory setting (host RAM), stamped with this process's generation;
    /// returns its outcome and the worker's report taken after it.
    pub fn set(&self, setting: Setting, timeout: Duration) -> Result<CommandResult, LaneError> {
        let generation = self.generation;
        let msg = |seq| Message::Set {
            seq,
            generation,
            setting,
        };
        self.command(msg, timeout)
    }

    fn command(
        &self,
        make: impl FnOnce(u64) -> Message,
        timeout: Duration,
    ) -> Result<CommandResult, LaneError> {
        match self.request(make, timeout)? {
            Message::CommandDone {
                outcome, report, ..
            } => Ok((outcome, report)),
            other => Err(self.control.refuse(unexpected(&other))),
        }
    }

    /// One request and its answer on the control lane. Requests are serialized, so an answer
    /// is never taken by another caller; a late answer to a timed-out request is skipped by
    /// its sequence number.
    fn request(
        &self,
        make: impl FnOnce(u64) -> Message,
        timeout: Duration,
    ) -> Result<Message, LaneError> {
        let mut last = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *last += 1;
        let seq = *last;
        let start = Instant::now();
        self.control.send_within(&make(seq), timeout)?;
        loop {
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(LaneError::Io(std::io::ErrorKind::TimedOut.into()));
            }
            match self.control.recv_timeout(left)? {
                Some(m) if answer_seq(&m) == Some(seq) => {
                    self.heard.frame(&m);
                    return Ok(m);
                }
                Some(m) => self.heard.frame(&m),
                None => return Err(LaneError::Closed),
            }
        }
    }

    /// The error for a caller whose lane broke: waits briefly for the exit status and the
    /// last of stderr, so the message says what happened.
    pub fn died(&self, during: &str) -> WorkerDied {
        let status = self
            .exit
            .wait(Duration::from_millis(100))
            .unwrap_or(ExitDescription::Unknown);
        WorkerDied {
            name: self.name.clone(),
            pid: self.pid,
            generation: self.generation,
            during: during.to_owned(),
            status,
            verdict: self.heard.verdict(),
            stderr_tail: self.stderr_tail.snapshot(Duration::from_millis(50)),
        }
    }

    /// Why the supervisor killed this worker, if it did (e.g. it was declared hung).
    pub fn verdict(&self) -> Option<String> {
        self.heard.verdict()
    }

    /// Raises the interrupt flag for call `id`: the node stops at its next interruption check.
    pub fn interrupt(&self, id: u64) {
        self.signal.raise(id);
    }

    /// Withdraws an interrupt for call `id` that the worker did not consume.
    pub fn clear_interrupt(&self, id: u64) {
        self.signal.clear(id);
    }

    /// SIGINT to the worker alone (not its children): Python raises in the running node at its
    /// next bytecode.
    pub fn signal_interrupt(&self) {
        let _ = rustix::process::pidfd_send_signal(self.pidfd.as_ref(), Signal::INT);
    }

    /// Asks the worker to finish and exit; kills its process group if it has not exited
    /// within `grace`.
    pub fn shutdown(&self, grace: Duration) -> ExitDescription {
        if self.is_alive() {
            // Bounded: a worker that does not read its call lane gets no longer than `grace`.
            let start = Instant::now();
            let _ = self.call.send_within(&Message::Shutdown, Some(grace));
            if let Some(s) = self.exit.wait(grace.saturating_sub(start.elapsed())) {
                self.kill_group();
                return s;
            }
        }
        self.kill();
        self.exit
            .wait(Duration::from_secs(2))
            .unwrap_or(ExitDescription::Unknown)
    }

    /// SIGKILL to the worker and everything it forked.
    pub fn kill(&self) {
        let _ = rustix::process::pidfd_send_signal(self.pidfd.as_ref(), Signal::KILL);
        self.kill_group();
    }

    fn kill_group(&self) {
        if let Some(p) = Pid::from_raw(self.pid) {
            let _ = rustix::process::kill_process_group(p, Signal::KILL);
        }
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        if self.is_alive() {
            self.kill();
            let _ = self.exit.wait(Duration::from_secs(2));
        } else {
            self.kill_group();
        }
    }
}

/// The error of a worker whose lanes did not come in; it is killed and reaped first.
fn refused_start(
    spec: &WorkerSpec,
    pidfd: &OwnedFd,
    pid: i32,
    stderr_tail: &Tail,
    e: Accept,
) -> SpawnError {
    kill_now(pidfd, pid);
    match e {
        Accept::Exited => SpawnError::ExitedEarly {
            status: reap(pidfd),
            stderr_tail: stderr_tail.snapshot(Duration::from_millis(500)),
        },
        Accept::Timeout => {
            let _ = reap(pidfd);
            SpawnError::Timeout {
                secs: spec.connect_timeout.as_secs_f64(),
                stderr_tail: stderr_tail.snapshot(Duration::from_millis(200)),
            }
        }
        Accept::Failed(e) => {
            crate::rejections::count_spawn(&e);
            let _ = reap(pidfd);
            e
        }
    }
}

/// The sequence number a control-lane answer refers to.
fn answer_seq(m: &Message) -> Option<u64> {
    match m {
        Message::Pong { seq } | Message::Report { seq, .. } | Message::CommandDone { seq, .. } => {
            Some(*seq)
        }
        _ => None,
    }
}

fn unexpected(m: &Message) -> LaneError {
    LaneError::Protocol(format!("unexpected {} on the control lane", m.kind()))
}

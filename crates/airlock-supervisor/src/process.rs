//! One running worker: spawn, handshake, reaping, and shutdown.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use airlock_wire::{Hello, Message, ModelOp, ModelOutcome, Side, Token, Value};
use rustix::process::{Pid, PidfdFlags, Signal, WaitId, WaitIdOptions};

use crate::accept::{Accept, accept_lanes};
use crate::error::{LaneError, SpawnError, WorkerDied};
use crate::exec;
use crate::exit::ExitDescription;
use crate::guard::Guard;
use crate::lane::{CallLane, ControlLane};
use crate::liveness::{Heard, Watched, watch};
use crate::output::{OutputSink, Stream, Tail, forward};
use crate::private_tmp::PrivateTmp;
use crate::signal_page::{SIGNAL_FD, SignalPage};
use crate::spawn::{SocketDir, WorkerSpec, hex};

/// The fd on which a worker writes its logging records.
pub const LOG_FD: i32 = 3;

#[derive(Default)]
pub(crate) struct ExitState {
    status: Mutex<Option<ExitDescription>>,
    changed: Condvar,
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

/// A started worker with both lanes connected.
pub struct WorkerProcess {
    name: String,
    pid: i32,
    generation: u64,
    pidfd: Arc<OwnedFd>,
    call: Arc<CallLane>,
    control: Arc<ControlLane>,
    exit: Arc<ExitState>,
    stderr_tail: Arc<Tail>,
    hello: Hello,
    /// One control request in flight at a time, so that concurrent callers never take each
    /// other's answer; holds the last sequence number.
    requests: Arc<Mutex<u64>>,
    heard: Arc<Heard>,
    signal: SignalPage,
}

impl WorkerProcess {
    /// Starts a worker and completes the handshake on both lanes.
    pub fn spawn(
        spec: &WorkerSpec,
        generation: u64,
        sink: Arc<dyn OutputSink>,
    ) -> Result<WorkerProcess, SpawnError> {
        let sockdir = SocketDir::create()?;
        let tmp = PrivateTmp::create().map_err(SpawnError::TmpDir)?;
        let mut token = [0u8; airlock_wire::TOKEN_LEN];
        rustix::rand::getrandom(&mut token, rustix::rand::GetRandomFlags::empty())
            .map_err(|e| SpawnError::SocketDir(e.into()))?;
        let token = Token(token);

        let (log_r, log_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| SpawnError::SocketDir(e.into()))?;
        let signal = SignalPage::create().map_err(SpawnError::SocketDir)?;
        let env = spec.environment(&sockdir.socket, &tmp.path);
        let signal_fd = signal.fd().expect("the host's page has its fd");
        let started = exec::spawn(&exec::Launch {
            program: &spec.python,
            args: &spec.args,
            env: &env,
            cwd: spec.cwd.as_deref(),
            inherit: &[(log_w.as_fd(), LOG_FD), (signal_fd, SIGNAL_FD)],
        })
        .map_err(|source| SpawnError::Exec {
            python: spec.python.display().to_string(),
            source,
        })?;
        drop(log_w);
        let pid = started.pid;
        let pidfd = match rustix::process::pidfd_open(
            Pid::from_raw(pid).expect("a child pid is positive"),
            PidfdFlags::empty(),
        ) {
            Ok(fd) => Arc::new(fd),
            Err(e) => {
                // Without a pidfd we cannot supervise it: do not leave it running. It is our
                // unreaped child, so the pid cannot have been reused.
                // SAFETY: plain syscalls on our own child.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, std::ptr::null_mut(), 0);
                }
                return Err(SpawnError::SocketDir(e.into()));
            }
        };
        let stderr_tail = Arc::new(Tail::default());
        let exec::Started {
            stdin: mut token_pipe,
            stdout,
            stderr,
            ..
        } = started;
        forward(
            spec.name.clone(),
            Stream::Stdout,
            stdout,
            sink.clone(),
            None,
        );
        forward(
            spec.name.clone(),
            Stream::Stderr,
            stderr,
            sink.clone(),
            Some(stderr_tail.clone()),
        );
        forward(
            spec.name.clone(),
            Stream::Log {
                level: 0,
                logger: String::new(),
            },
            std::fs::File::from(log_r),
            sink,
            None,
        );
        // The token goes over the worker's stdin, never its environment or argv (both readable
        // by other processes of the same user).
        let _ = writeln!(token_pipe, "{}", hex(&token.0));
        drop(token_pipe);

        let kill_now = |pidfd: &OwnedFd| {
            let _ = rustix::process::pidfd_send_signal(pidfd, Signal::KILL);
            if let Some(p) = Pid::from_raw(pid) {
                let _ = rustix::process::kill_process_group(p, Signal::KILL);
            }
        };
        let accepted = accept_lanes(&sockdir, &pidfd, pid, &token, spec.connect_timeout);
        drop(sockdir);
        let (call, control, hello) = match accepted {
            Ok(lanes) => lanes,
            Err(e) => {
                kill_now(&pidfd);
                return Err(match e {
                    Accept::Exited => SpawnError::ExitedEarly {
                        status: reap(&pidfd),
                        stderr_tail: stderr_tail.snapshot(Duration::from_millis(500)),
                    },
                    Accept::Timeout => {
                        let _ = reap(&pidfd);
                        SpawnError::Timeout {
                            secs: spec.connect_timeout.as_secs_f64(),
                            stderr_tail: stderr_tail.snapshot(Duration::from_millis(200)),
                        }
                    }
                    Accept::Failed(e) => {
                        crate::rejections::count_spawn(&e);
                        let _ = reap(&pidfd);
                        e
                    }
                });
            }
        };
        let welcome = Message::Welcome {
            generation,
            name: spec.name.clone(),
        };
        let call = Arc::new(CallLane::from_framed(call, Side::Host, spec.pool.clone()));
        let control = Arc::new(ControlLane::from_framed(control));
        // Input refused on either lane ends this worker (guard.rs).
        let heard = Arc::new(Heard::new());
        let guard = Guard::ending(pidfd.clone(), pid, heard.clone());
        call.arm(guard.clone());
        control.arm(guard);
        let welcomed = control.send(&welcome).and_then(|_| call.send(&welcome));
        if let Err(e) = welcomed {
            kill_now(&pidfd);
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
            pidfd.clone(),
            exit.clone(),
            call.clone(),
            control.clone(),
            tmp,
            pid,
        );
        Ok(WorkerProcess {
            name: spec.name.clone(),
            pid,
            generation,
            pidfd,
            call,
            control,
            exit,
            stderr_tail,
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

    /// Round trip on the control lane, answered by the worker without its Python thread, so it
    /// works while a call is running.
    pub fn ping(&self, timeout: Duration) -> Result<Duration, LaneError> {
        let start = Instant::now();
        self.request(|seq| Message::Ping { seq }, timeout)?;
        Ok(start.elapsed())
    }

    /// The worker's latest memory report, answered by its control thread from what it last
    /// published (so idle and busy workers alike answer at once).
    pub fn heartbeat(&self, timeout: Duration) -> Result<Value, LaneError> {
        match self.request(|seq| Message::Heartbeat { seq }, timeout)? {
            Message::Report { report, .. } => Ok(report),
            other => Err(self.control.refuse(unexpected(&other))),
        }
    }

    /// Runs `op` on `model` in the worker, stamped with this process's generation, and
    /// returns its outcome and the worker's report taken after it.
    pub fn model_command(
        &self,
        model: u64,
        op: ModelOp,
        timeout: Duration,
    ) -> Result<(ModelOutcome, Value), LaneError> {
        let generation = self.generation;
        let msg = |seq| Message::Model {
            seq,
            generation,
            model,
            op,
        };
        match self.request(msg, timeout)? {
            Message::ModelDone {
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
                    self.heard.now();
                    return Ok(m);
                }
                Some(_) => self.heard.now(),
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

/// Blocks until the process behind `pidfd` exits and says how.
fn reap(pidfd: &OwnedFd) -> ExitDescription {
    loop {
        match rustix::process::waitid(WaitId::PidFd(pidfd.as_fd()), WaitIdOptions::EXITED) {
            Ok(Some(st)) => {
                return if let Some(sig) = st.terminating_signal() {
                    ExitDescription::Signal(sig)
                } else if let Some(code) = st.exit_status() {
                    ExitDescription::Code(code)
                } else {
                    ExitDescription::Unknown
                };
            }
            Err(rustix::io::Errno::INTR) | Ok(None) => continue,
            Err(_) => return ExitDescription::Unknown,
        }
    }
}

fn start_reaper(
    name: &str,
    pidfd: Arc<OwnedFd>,
    exit: Arc<ExitState>,
    call: Arc<CallLane>,
    control: Arc<ControlLane>,
    tmp: PrivateTmp,
    pid: i32,
) {
    let run = move || {
        let status = reap(&pidfd);
        // What the worker forked dies with it (its group is the worker's pid), not when the
        // host next drops the process.
        if let Some(p) = Pid::from_raw(pid) {
            let _ = rustix::process::kill_process_group(p, Signal::KILL);
        }
        // Gone before anyone hears of the exit: a stopped worker has no temp files left.
        drop(tmp);
        // Wake anyone blocked on a lane; they will find the status set.
        *exit.status.lock().unwrap_or_else(|p| p.into_inner()) = Some(status);
        call.shutdown();
        control.shutdown();
        call.peer_gone();
        exit.changed.notify_all();
    };
    let _ = std::thread::Builder::new()
        .name(format!("airlock-reap-{name}"))
        .spawn(run);
}

/// The sequence number a control-lane answer refers to.
fn answer_seq(m: &Message) -> Option<u64> {
    match m {
        Message::Pong { seq } | Message::Report { seq, .. } | Message::ModelDone { seq, .. } => {
            Some(*seq)
        }
        _ => None,
    }
}

fn unexpected(m: &Message) -> LaneError {
    LaneError::Protocol(format!("unexpected {} on the control lane", m.kind()))
}

//! A worker's life as a process, before and after its lanes: starting the interpreter (socket
//! directory, private temp dir, token, log pipe, signal page, `posix_spawn`, pidfd), forwarding
//! its output, and reaping it when it exits. [`WorkerProcess::spawn`](crate::WorkerProcess)
//! does the handshake in between.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use airlock_wire::Token;
use rustix::process::{Pid, PidfdFlags, Signal, WaitId, WaitIdOptions};

use crate::error::SpawnError;
use crate::exec;
use crate::exit::ExitDescription;
use crate::lane::{CallLane, ControlLane};
use crate::output::{OutputSink, Stream, Tail, forward};
use crate::private_tmp::PrivateTmp;
use crate::process::ExitState;
use crate::signal_page::{SIGNAL_FD, SignalPage};
use crate::spawn::{SocketDir, WorkerSpec, hex};

/// The fd on which a worker writes its logging records.
pub const LOG_FD: i32 = 3;

/// A started interpreter, its handshake still to come.
pub(crate) struct Launched {
    pub pid: i32,
    pub pidfd: Arc<OwnedFd>,
    /// The socket the worker connects back to; dropped (removed) once both lanes are in.
    pub sockdir: SocketDir,
    pub token: Token,
    pub tmp: PrivateTmp,
    pub signal: SignalPage,
    pub stderr_tail: Arc<Tail>,
}

/// Starts the worker's interpreter with its environment, fds 0-4, and the token on stdin;
/// its stdout, stderr and log records go to `sink`.
pub(crate) fn launch(spec: &WorkerSpec, sink: Arc<dyn OutputSink>) -> Result<Launched, SpawnError> {
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
    let exec::Started {
        stdin: mut token_pipe,
        stdout,
        stderr,
        ..
    } = started;
    let stderr_tail = Arc::new(Tail::default());
    let name = &spec.name;
    forward(name.clone(), Stream::Stdout, stdout, sink.clone(), None);
    let tail = Some(stderr_tail.clone());
    forward(name.clone(), Stream::Stderr, stderr, sink.clone(), tail);
    let log = Stream::Log {
        level: 0,
        logger: String::new(),
    };
    forward(name.clone(), log, std::fs::File::from(log_r), sink, None);
    // The token goes over the worker's stdin, never its environment or argv (both readable
    // by other processes of the same user).
    let _ = writeln!(token_pipe, "{}", hex(&token.0));
    drop(token_pipe);
    Ok(Launched {
        pid,
        pidfd,
        sockdir,
        token,
        tmp,
        signal,
        stderr_tail,
    })
}

/// SIGKILL to the worker and its process group.
pub(crate) fn kill_now(pidfd: &OwnedFd, pid: i32) {
    let _ = rustix::process::pidfd_send_signal(pidfd, Signal::KILL);
    if let Some(p) = Pid::from_raw(pid) {
        let _ = rustix::process::kill_process_group(p, Signal::KILL);
    }
}

/// Blocks until the process behind `pidfd` exits and says how.
pub(crate) fn reap(pidfd: &OwnedFd) -> ExitDescription {
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

/// What the reaper thread ends when the worker exits.
pub(crate) struct Reaped {
    pub pidfd: Arc<OwnedFd>,
    pub exit: Arc<ExitState>,
    pub call: Arc<CallLane>,
    pub route: Arc<CallLane>,
    pub events: Arc<CallLane>,
    pub control: Arc<ControlLane>,
    pub tmp: PrivateTmp,
    pub pid: i32,
}

/// A thread that waits for the worker's exit, then records it and wakes everyone who waits on
/// the worker.
pub(crate) fn start_reaper(name: &str, r: Reaped) {
    let run = move || {
        let status = reap(&r.pidfd);
        // What the worker forked dies with it (its group is the worker's pid), not when the
        // host next drops the process.
        if let Some(p) = Pid::from_raw(r.pid) {
            let _ = rustix::process::kill_process_group(p, Signal::KILL);
        }
        // Gone before anyone hears of the exit: a stopped worker has no temp files left.
        drop(r.tmp);
        // Wake anyone blocked on a lane; they will find the status set.
        *r.exit.status.lock().unwrap_or_else(|p| p.into_inner()) = Some(status);
        r.call.shutdown();
        r.route.shutdown();
        r.events.shutdown();
        r.control.shutdown();
        r.call.peer_gone();
        r.route.peer_gone();
        r.events.peer_gone();
        r.exit.changed.notify_all();
    };
    let _ = std::thread::Builder::new()
        .name(format!("airlock-reap-{name}"))
        .spawn(run);
}

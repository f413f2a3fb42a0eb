//! Real worker processes without Python: this test binary re-executes itself as the worker
//! (the `fake_worker` entry below runs only when `AIRLOCK_FAKE_WORKER` is set).

use std::io::BufRead;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_shm::PoolConfig;
use airlock_supervisor::{
    ExitDescription, LaneError, Liveness, ModelHandler, OutputSink, SIGNAL_FD, SignalPage,
    SpawnError, Stream, WorkerIdentity, WorkerProcess, WorkerSpec,
};
use airlock_wire::{HandshakeError, Message, ModelOp, ModelOutcome, Token, Value};

#[derive(Default)]
struct Collect(Mutex<Vec<String>>);

impl OutputSink for Collect {
    fn emit(&self, _worker: &str, _stream: &Stream, line: &str) {
        self.0.lock().unwrap().push(line.to_owned());
    }
}

fn spec(mode: &str) -> WorkerSpec {
    let exe = std::env::current_exe().unwrap();
    WorkerSpec {
        name: format!("fake-{mode}"),
        python: exe,
        args: ["fake_worker", "--exact", "--nocapture", "--test-threads=1"]
            .iter()
            .map(Into::into)
            .collect(),
        env: vec![("AIRLOCK_FAKE_WORKER".into(), mode.into())],
        cwd: None,
        connect_timeout: Duration::from_secs(20),
        liveness: None,
        pool: PoolConfig::default(),
    }
}

fn parse_token(hex: &str) -> Token {
    let mut t = [0u8; 32];
    for (i, b) in t.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    Token(t)
}

/// The worker side. A no-op unless this binary was started as a fake worker.
#[test]
fn fake_worker() {
    let Ok(mode) = std::env::var("AIRLOCK_FAKE_WORKER") else {
        return;
    };
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    let mut token = parse_token(line.trim());
    if mode == "bad-token" {
        token.0[0] ^= 1;
    }
    let socket = std::env::var("AIRLOCK_SOCKET").unwrap();
    let id = WorkerIdentity {
        python: "fake".into(),
        torch: None,
        numpy: None,
    };
    let connected =
        airlock_supervisor::connect(socket.as_ref(), token, &id, PoolConfig::default(), || {
            std::process::exit(0)
        });
    let Ok((lane, control, _name)) = connected else {
        std::process::exit(2);
    };
    control.publish(Value::Str("idle".into()));
    control.set_handler(Arc::new(FakeModels));
    eprintln!("fake worker ready");
    while let Ok(Some(msg)) = lane.recv() {
        match msg {
            Message::Call {
                id, target, args, ..
            } => {
                if target == "die" {
                    eprintln!("dying on purpose");
                    // SIGTERM rather than abort: no core file, whatever the ulimit.
                    // SAFETY: raising a signal at ourselves.
                    unsafe { libc::raise(libc::SIGTERM) };
                }
                if target == "sleep" {
                    std::thread::sleep(Duration::from_secs(30));
                }
                if target == "spin" {
                    // A node that checks for interrupts the way ComfyUI's do, through the page
                    // the host handed over.
                    let fd = std::os::fd::OwnedFd::from(
                        std::fs::File::options()
                            .read(true)
                            .write(true)
                            .open(format!("/proc/self/fd/{SIGNAL_FD}"))
                            .unwrap(),
                    );
                    let page = SignalPage::adopt(fd).unwrap();
                    while !page.take(id) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    lane.send(&Message::Reply {
                        id,
                        value: Value::Str("interrupted".into()),
                    })
                    .unwrap();
                    continue;
                }
                lane.send(&Message::Reply { id, value: args }).unwrap();
            }
            Message::Shutdown => break,
            _ => {}
        }
    }
    std::process::exit(0);
}

/// The fake worker's models: model `m` frees `m * 10` bytes, except model 0, which is busy.
struct FakeModels;

impl ModelHandler for FakeModels {
    fn run(&self, model: u64, op: ModelOp) -> (ModelOutcome, Value) {
        let outcome = match (model, op) {
            (0, _) => ModelOutcome::Refused {
                reason: "in use".into(),
            },
            (m, ModelOp::Unload) => ModelOutcome::Done { bytes: m * 10 },
            (_, ModelOp::PartiallyUnload { bytes }) => ModelOutcome::Done { bytes },
            (_, ModelOp::PartiallyLoad { extra }) => ModelOutcome::Done {
                bytes: extra.max(0.0) as u64,
            },
            (_, ModelOp::PinCeiling { .. } | ModelOp::CacheHeadroom { .. }) => {
                ModelOutcome::Done { bytes: 0 }
            }
        };
        (outcome, Value::Str(format!("after {model}")))
    }
}

fn start(mode: &str, sink: Arc<Collect>) -> Result<WorkerProcess, SpawnError> {
    WorkerProcess::spawn(&spec(mode), 1, sink)
}

#[test]
fn spawn_call_and_orderly_shutdown() {
    if std::env::var("AIRLOCK_FAKE_WORKER").is_ok() {
        return;
    }
    let w = start("echo", Arc::default()).unwrap();
    assert_eq!(w.generation(), 1);
    assert_eq!(w.hello().python, "fake");
    let args = Value::Tuple(vec![Value::Int(7), Value::Str("x".into())]);
    w.call_lane()
        .send(&Message::Call {
            id: 9,
            target: "echo".into(),
            args: args.clone(),
            kwargs: Value::Dict(vec![]),
        })
        .unwrap();
    assert_eq!(
        w.call_lane().recv().unwrap(),
        Some(Message::Reply { id: 9, value: args })
    );
    assert!(w.ping(Duration::from_secs(5)).is_ok());
    assert_eq!(w.shutdown(Duration::from_secs(5)), ExitDescription::Code(0));
}

#[test]
fn death_mid_call_wakes_the_caller_with_status_and_stderr() {
    if std::env::var("AIRLOCK_FAKE_WORKER").is_ok() {
        return;
    }
    let sink = Arc::new(Collect::default());
    let w = start("echo", sink.clone()).unwrap();
    let lane = w.call_lane().clone();
    lane.send(&Message::Call {
        id: 1,
        target: "die".into(),
        args: Value::None,
        kwargs: Value::None,
    })
    .unwrap();
    let start = Instant::now();
    let got = lane.recv();
    assert!(matches!(got, Ok(None) | Err(LaneError::Io(_))), "{got:?}");
    assert!(start.elapsed() < Duration::from_secs(2));
    // The lane closes as the process goes; its status is the reaper thread's to record, which
    // a loaded machine may schedule after `died`'s own 100 ms wait (seen 2 runs in 6).
    assert_eq!(
        w.wait_exit(Duration::from_secs(5)),
        Some(ExitDescription::Signal(libc::SIGTERM))
    );
    let died = w.died("a call to 'die'");
    assert_eq!(died.status, ExitDescription::Signal(libc::SIGTERM));
    let text = died.to_string();
    assert!(
        text.contains("fake-echo") && text.contains("SIGTERM"),
        "{text}"
    );
    assert!(text.contains("dying on purpose"), "{text}");
}

#[test]
fn a_killed_worker_is_noticed_while_the_caller_waits() {
    if std::env::var("AIRLOCK_FAKE_WORKER").is_ok() {
        return;
    }
    let w = Arc::new(start("echo", Arc::default()).unwrap());
    let lane = w.call_lane().clone();
    lane.send(&Message::Call {
        id: 1,
        target: "sleep".into(),
        args: Value::None,
        kwargs: Value::None,
    })
    .unwrap();
    let killer = {
        let w = w.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            w.kill();
            Instant::now()
        })
    };
    let got = lane.recv();
    let woke = Instant::now();
    let killed = killer.join().unwrap();
    assert!(matches!(got, Ok(None) | Err(LaneError::Io(_))), "{got:?}");
    assert!(woke.duration_since(killed) < Duration::from_millis(100));
    assert_eq!(
        w.wait_exit(Duration::from_secs(1)),
        Some(ExitDescription::Signal(libc::SIGKILL))
    );
}

#[test]
fn wrong_token_is_refused_at_the_handshake() {
    if std::env::var("AIRLOCK_FAKE_WORKER").is_ok() {
        return;
    }
    match start("bad-token", Arc::default()) {
        Err(SpawnError::Handshake(HandshakeError::BadToken)) => {}
        Err(e) => panic!("expected a bad-token refusal, got {e}"),
        Ok(_) => panic!("a worker with the wrong token was accepted"),
    }
}

#[test]
fn heartbeats_and_model_commands_are_answered_while_a_call_runs() {
    if std::env::var("AIRLOCK_FAKE_WORKER").is_ok() {
        return;
    }
    let w = Arc::new(start("echo", Arc::default()).unwrap());
    let t = Duration::from_secs(5);
    // The fake publishes its first report just after connecting: wait for it.
    let until = Instant::now() + t;
    while w.heartbeat(t).unwrap() == Value::None && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(w.heartbeat(t).unwrap(), Value::Str("idle".into()));
    // A call that keeps the worker's call lane busy for 30 s.
    w.call_lane()
        .send(&Message::Call {
            id: 1,
            target: "sleep".into(),
            args: Value::None,
            kwargs: Value::None,
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let (outcome, report) = w.model_command(3, ModelOp::Unload, t).unwrap();
    assert_eq!(outcome, ModelOutcome::Done { bytes: 30 });
    assert_eq!(report, Value::Str("after 3".into()));
    let (outcome, _) = w
        .model_command(5, ModelOp::PartiallyUnload { bytes: 123 }, t)
        .unwrap();
    assert_eq!(outcome, ModelOutcome::Done { bytes: 123 });
    let (outcome, _) = w.model_command(0, ModelOp::Unload, t).unwrap();
    assert!(matches!(outcome, ModelOutcome::Refused { .. }));
    assert_eq!(w.heartbeat(t).unwrap(), Value::Str("idle".into()));
    w.kill();
}

#[test]
fn an_interrupt_reaches_a_node_that_checks_through_the_signal_page() {
    if std::env::var("AIRLOCK_FAKE_WORKER").is_ok() {
        return;
    }
    let w = start("echo", Arc::default()).unwrap();
    let lane = w.call_lane().clone();
    lane.send(&Message::Call {
        id: 7,
        target: "spin".into(),
        args: Value::None,
        kwargs: Value::None,
    })
    .unwrap();
    // Not yet interrupted: nothing comes back.
    let early = lane.recv_within(Duration::from_millis(200));
    assert!(
        matches!(&early, Err(LaneError::Io(e)) if e.kind() == std::io::ErrorKind::TimedOut),
        "{early:?}"
    );
    w.interrupt(6); // another call's interrupt is not this one's
    let still = lane.recv_within(Duration::from_millis(100));
    assert!(still.is_err(), "{still:?}");
    w.interrupt(7);
    let got = lane.recv_within(Duration::from_secs(10));
    assert!(
        matches!(got, Ok(Some(Message::Reply { id: 7, .. }))),
        "{got:?}"
    );
    w.kill();
}

#[test]
fn a_frozen_worker_is_declared_hung_and_a_long_quiet_call_is_not() {
    if std::env::var("AIRLOCK_FAKE_WORKER").is_ok() {
        return;
    }
    let mut s = spec("echo");
    s.liveness = Some(Liveness {
        interval: Duration::from_millis(50),
        grace: Duration::from_millis(400),
    });
    let w = WorkerProcess::spawn(&s, 1, Arc::<Collect>::default()).unwrap();
    let lane = w.call_lane().clone();
    lane.send(&Message::Call {
        id: 1,
        target: "sleep".into(),
        args: Value::None,
        kwargs: Value::None,
    })
    .unwrap();
    // Busy in a call for several graces, but its control lane answers: alive.
    let quiet = lane.recv_within(Duration::from_millis(1500));
    assert!(quiet.is_err(), "{quiet:?}");
    assert!(w.is_alive() && w.verdict().is_none());
    // Frozen: nothing answers any more.
    let pid = rustix::process::Pid::from_raw(w.pid()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
    let got = lane.recv_within(Duration::from_secs(20));
    assert!(matches!(got, Ok(None) | Err(LaneError::Io(_))), "{got:?}");
    assert_eq!(
        w.wait_exit(Duration::from_secs(5)),
        Some(ExitDescription::Signal(libc::SIGKILL))
    );
    let died = w.died("a call to 'sleep'").to_string();
    assert!(died.contains("declared hung"), "{died}");
}

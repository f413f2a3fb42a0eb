//! Real worker processes without Python: this test binary re-executes itself as the worker
//! (`tests/fake/mod.rs`: the `fake_worker` entry below runs only when `AIRLOCK_FAKE_WORKER` is
//! set), which runs the supervisor's own call loop.

mod fake;

use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_supervisor::{ExitDescription, LaneError, Liveness, SpawnError, WorkerProcess};
use airlock_wire::{HandshakeError, Message, ModelOp, ModelOutcome, Setting, Value};
use fake::{Collect, report, spec};

/// The worker side. A no-op unless this binary was started as a fake worker.
#[test]
fn fake_worker() {
    fake::main();
}

fn start(mode: &str, sink: Arc<Collect>) -> Result<WorkerProcess, SpawnError> {
    WorkerProcess::spawn(&spec(mode), 1, sink)
}

#[test]
fn spawn_call_and_orderly_shutdown() {
    if fake::is_worker() {
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
    if fake::is_worker() {
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
    if fake::is_worker() {
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
    if fake::is_worker() {
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
    if fake::is_worker() {
        return;
    }
    let w = Arc::new(start("echo", Arc::default()).unwrap());
    let t = Duration::from_secs(5);
    // The fake publishes its first report just after connecting: wait for it.
    let until = Instant::now() + t;
    while w.heartbeat(t).unwrap().is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    let first = w.heartbeat(t).unwrap().expect("a published report");
    assert_eq!(first.seq, 1);
    assert_eq!(first.pid, w.pid() as u32);
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
    let (outcome, after) = w.model_command(3, ModelOp::Unload, t).unwrap();
    assert_eq!(outcome, ModelOutcome::Done { bytes: 30 });
    let after = after.expect("a report after the command");
    assert_eq!((after.seq, after.models.len()), (13, 1));
    assert_eq!(after.models[0], report(13, &[3]).models[0]);
    let (outcome, _) = w
        .model_command(5, ModelOp::PartiallyUnload { bytes: 123 }, t)
        .unwrap();
    assert_eq!(outcome, ModelOutcome::Done { bytes: 123 });
    let (outcome, _) = w.model_command(0, ModelOp::Unload, t).unwrap();
    assert!(matches!(outcome, ModelOutcome::Refused { .. }));
    // A worker-wide setting travels as its own command, not as model 0's.
    let (outcome, after) = w.set(Setting::PinCeiling { bytes: 1 << 30 }, t).unwrap();
    assert_eq!(outcome, ModelOutcome::Done { bytes: 1 << 30 });
    assert_eq!(after.map(|r| r.seq), Some(99));
    // Heartbeats answer with what the worker published, not the commands' reports.
    assert_eq!(w.heartbeat(t).unwrap().map(|r| r.seq), Some(1));
    w.kill();
}

#[test]
fn the_liveness_timer_keeps_the_latest_report_and_never_kills_without_a_grace() {
    if fake::is_worker() {
        return;
    }
    let mut s = spec("echo");
    s.liveness = Some(Liveness {
        interval: Duration::from_millis(50),
        grace: None,
    });
    let w = WorkerProcess::spawn(&s, 1, Arc::<Collect>::default()).unwrap();
    // No request of ours: the timer's heartbeats bring the report the fake published.
    let until = Instant::now() + Duration::from_secs(10);
    while w.last_report().is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    let kept = w
        .last_report()
        .expect("the timer read the published report");
    assert_eq!((kept.seq, kept.pid), (1, w.pid() as u32));
    // A command's own report (seq 13) is its caller's; the timer keeps what is published.
    let (_, after) = w
        .model_command(3, ModelOp::Unload, Duration::from_secs(5))
        .unwrap();
    assert_eq!(after.map(|r| r.seq), Some(13));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(w.last_report().map(|r| r.seq), Some(1));
    // Frozen with no grace: reports stop coming, the worker is not declared hung.
    let pid = rustix::process::Pid::from_raw(w.pid()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(w.is_alive() && w.verdict().is_none());
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
    w.kill();
}

#[test]
fn an_interrupt_reaches_a_node_that_checks_through_the_signal_page() {
    if fake::is_worker() {
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
    if fake::is_worker() {
        return;
    }
    let mut s = spec("echo");
    s.liveness = Some(Liveness {
        interval: Duration::from_millis(50),
        grace: Some(Duration::from_millis(400)),
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

#[test]
fn the_kernel_says_a_worker_is_gone_before_its_reaper_has_to() {
    if fake::is_worker() {
        return;
    }
    let w = start("echo", Arc::default()).unwrap();
    assert!(!w.exited_within(Duration::from_millis(50)), "alive");
    let pid = rustix::process::Pid::from_raw(w.pid()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    assert!(w.exited_within(Duration::from_secs(10)), "killed");
    assert_eq!(
        w.wait_exit(Duration::from_secs(10)),
        Some(ExitDescription::Signal(libc::SIGKILL))
    );
    assert!(w.exited_within(Duration::ZERO), "still gone");
}

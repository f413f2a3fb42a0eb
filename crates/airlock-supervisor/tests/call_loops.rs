//! The two call loops end to end, without Python: the host's side of a call
//! ([`airlock_supervisor::exchange`], with `fake::TestHost`) against a real worker process
//! running the worker's loop ([`airlock_supervisor::serve`], with the fake worker's runner).
//! What the Python binding adds on either side is conversion and callbacks only.

mod fake;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use airlock_supervisor::{
    Broken, CallLane, CallWatch, Cause, Ended, InterruptPolicy, WorkerProcess, exchange_on,
};
use airlock_wire::{Message, Notice, Question, Value};
use fake::{Collect, TestHost, load, report, spec};

/// The worker side. A no-op unless this binary was started as a fake worker.
#[test]
fn fake_worker() {
    fake::main();
}

fn start() -> WorkerProcess {
    WorkerProcess::spawn(&spec("serve"), 1, Arc::<Collect>::default()).unwrap()
}

/// Runs call `id` of `target` with `args` through the host's loop.
fn call(
    w: &WorkerProcess,
    host: &mut TestHost,
    id: u64,
    target: &str,
    args: Value,
    deadline: Option<Duration>,
) -> (Result<Ended<String>, Broken>, Option<Cause>) {
    call_on(w, w.call_lane(), host, id, target, args, deadline)
}

/// [`call`] on one of the worker's call lanes.
fn call_on(
    w: &WorkerProcess,
    lane: &Arc<CallLane>,
    host: &mut TestHost,
    id: u64,
    target: &str,
    args: Value,
    deadline: Option<Duration>,
) -> (Result<Ended<String>, Broken>, Option<Cause>) {
    let requested = AtomicBool::new(false);
    let policy = InterruptPolicy {
        signal_after: None,
        kill_after: None,
    };
    let msg = Message::Call {
        id,
        target: target.into(),
        args,
        kwargs: Value::Dict(Vec::new()),
    };
    let mut watch = CallWatch::new(id, deadline, &requested, policy);
    let ended = exchange_on(w, lane, &msg, id, &mut watch, host);
    watch.finish(w);
    (ended, watch.cause())
}

fn replied(r: Result<Ended<String>, Broken>) -> Value {
    match r {
        Ok(Ended::Replied {
            value,
            deferred: None,
        }) => value,
        Ok(Ended::Replied { deferred, .. }) => panic!("deferred error {deferred:?}"),
        Ok(Ended::Raised { error, .. }) => panic!("raised {error:?}"),
        Err(e) => panic!("broken: {e:?}"),
    }
}

#[test]
fn calls_reply_and_raise_and_targets_resolve_once() {
    if fake::is_worker() {
        return;
    }
    let w = start();
    let mut host = TestHost::default();
    let args = Value::Tuple(vec![Value::Int(7), Value::Str("x".into())]);
    let (got, _) = call(&w, &mut host, 1, "echo", args.clone(), None);
    assert_eq!(replied(got), args);
    let (got, _) = call(&w, &mut host, 2, "echo", Value::Tuple(vec![]), None);
    assert_eq!(replied(got), Value::Tuple(vec![]));
    // Two calls of echo, one of resolved: two resolutions.
    let (got, _) = call(&w, &mut host, 3, "resolved", Value::None, None);
    assert_eq!(replied(got), Value::Int(2));
    // The worker's exception, as its runner described it; the worker carries on.
    match call(&w, &mut host, 4, "fail", Value::None, None).0 {
        Ok(Ended::Raised { error, deferred }) => {
            assert_eq!(
                (error.qualname.as_str(), error.message.as_str()),
                ("Error", "boom")
            );
            assert!(deferred.is_none());
        }
        _ => panic!("expected the worker's exception"),
    }
    match call(&w, &mut host, 5, "nope", Value::None, None).0 {
        Ok(Ended::Raised { error, .. }) => {
            assert!(error.message.contains("no target"), "{error:?}")
        }
        _ => panic!("expected the resolution's exception"),
    }
    let (got, _) = call(&w, &mut host, 6, "echo", Value::Int(1), None);
    assert_eq!(replied(got), Value::Int(1));
    assert_eq!(
        host.seen,
        Default::default(),
        "no event, question or interrupt check"
    );
    assert_eq!(
        w.shutdown(Duration::from_secs(5)),
        airlock_supervisor::ExitDescription::Code(0)
    );
}

#[test]
fn memory_questions_and_notices_are_typed_end_to_end() {
    if fake::is_worker() {
        return;
    }
    let w = start();
    let mut host = TestHost::default();
    let (got, _) = call(&w, &mut host, 1, "admit", Value::None, None);
    assert_eq!(
        replied(got),
        Value::Tuple(vec![Value::Bool(true), Value::Int(9)])
    );
    assert_eq!(host.seen.questions, vec![Question::Admit(load())]);
    // The host could not decide: the worker gets the reason.
    host.unanswered = true;
    let (got, _) = call(&w, &mut host, 2, "admit", Value::None, None);
    assert_eq!(replied(got), Value::Str("no bridge".into()));
    // Notices reach the host during the call, in order, and need no answer.
    let (got, _) = call(&w, &mut host, 3, "notify", Value::None, None);
    assert_eq!(replied(got), Value::Int(0));
    let sent = airlock_wire::WorkerReport {
        pid: w.pid() as u32,
        ..report(2, &[3])
    };
    assert_eq!(
        host.seen.notices,
        vec![
            Notice::Loaded { holds: vec![1, 2] },
            Notice::Telemetry(sent)
        ]
    );
    // A question asked as an event is answered on the lane too.
    let (got, _) = call(
        &w,
        &mut host,
        4,
        "double",
        Value::Tuple(vec![Value::Int(21)]),
        None,
    );
    assert_eq!(replied(got), Value::Int(42));
    assert_eq!(host.seen.events, vec![("double?".into(), Value::Int(21))]);
    w.kill();
}

#[test]
fn a_failing_handler_is_raised_after_the_reply_and_stops_the_call() {
    if fake::is_worker() {
        return;
    }
    let w = start();
    let mut host = TestHost {
        fail_events: true,
        ..TestHost::default()
    };
    let (got, cause) = call(&w, &mut host, 1, "notify", Value::None, None);
    match got {
        Ok(Ended::Replied {
            value,
            deferred: Some(e),
        }) => {
            assert_eq!(value, Value::Int(0));
            assert_eq!(e, "notice handler failed", "the first failure is kept");
        }
        _ => panic!("expected the reply with the handler's error deferred"),
    }
    // The call was asked to stop (the worker's node would have seen the flag).
    assert_eq!(cause, Some(Cause::Interrupted));
    assert_eq!(host.seen.notices.len(), 2, "the lane stayed in step");
    w.kill();
}

#[test]
fn the_host_interrupt_and_the_deadline_reach_a_node_through_the_loop() {
    if fake::is_worker() {
        return;
    }
    let w = start();
    // The host's cancel flag, looked at every tick while the node spins.
    let mut host = TestHost {
        interrupt_after: Some(3),
        ..TestHost::default()
    };
    let (got, cause) = call(&w, &mut host, 1, "spin", Value::None, None);
    assert_eq!(replied(got), Value::Str("interrupted".into()));
    assert_eq!(cause, Some(Cause::Interrupted));
    assert!(host.seen.interrupt_checks >= 4, "{:?}", host.seen);
    // The pack's deadline, with the host never asking.
    let mut host = TestHost::default();
    let started = Instant::now();
    let deadline = Duration::from_millis(150);
    let (got, cause) = call(&w, &mut host, 2, "spin", Value::None, Some(deadline));
    assert_eq!(replied(got), Value::Str("interrupted".into()));
    assert_eq!(cause, Some(Cause::Deadline(deadline)));
    assert!(started.elapsed() >= deadline);
    w.kill();
}

#[test]
fn a_worker_that_dies_mid_call_breaks_the_call() {
    if fake::is_worker() {
        return;
    }
    let w = start();
    let mut host = TestHost::default();
    let (got, _) = call(&w, &mut host, 1, "die", Value::None, None);
    assert!(matches!(got, Err(Broken::Lane(_))), "{:?}", got.err());
    assert!(w.wait_exit(Duration::from_secs(5)).is_some());
}

#[test]
fn the_route_lane_answers_while_a_call_runs_and_breaks_when_the_worker_dies() {
    if fake::is_worker() {
        return;
    }
    let w = Arc::new(start());
    // A node that runs for 30 s on the call lane.
    let busy = {
        let w = w.clone();
        std::thread::spawn(move || {
            let mut host = TestHost::default();
            call(&w, &mut host, 1, "sleep", Value::None, None).0
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    // Meanwhile the route lane answers calls, questions included, at once.
    let started = Instant::now();
    let mut host = TestHost::default();
    let args = Value::Tuple(vec![Value::Int(21)]);
    let (got, _) = call_on(&w, w.route_lane(), &mut host, 2, "double", args, None);
    assert_eq!(replied(got), Value::Int(42));
    let args = Value::Tuple(vec![Value::Str("pick".into())]);
    let (got, _) = call_on(&w, w.route_lane(), &mut host, 3, "echo", args.clone(), None);
    assert_eq!(replied(got), args);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(!busy.is_finished(), "the node's call is still running");
    // A worker that dies in a route call breaks it, and the node's call with it.
    let (got, _) = call_on(&w, w.route_lane(), &mut host, 4, "die", Value::None, None);
    assert!(matches!(got, Err(Broken::Lane(_))), "{:?}", got.err());
    let node = busy.join().unwrap();
    assert!(matches!(node, Err(Broken::Lane(_))), "{:?}", node.err());
    assert!(w.wait_exit(Duration::from_secs(5)).is_some());
}

#[test]
fn ui_messages_sent_outside_a_call_reach_the_events_reader_and_others_end_the_worker() {
    if fake::is_worker() {
        return;
    }
    let w = Arc::new(start());
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = {
        let lane = w.events_lane().clone();
        std::thread::spawn(move || {
            airlock_supervisor::read_events(&lane, |topic, payload| {
                let _ = tx.send((topic, payload));
            })
        })
    };
    let mut host = TestHost::default();
    let sent = |topic: &str, payload: Value| Value::Tuple(vec![Value::Str(topic.into()), payload]);
    let (got, _) = call(
        &w,
        &mut host,
        1,
        "post",
        sent("send_sync", Value::Int(3)),
        None,
    );
    assert_eq!(replied(got), Value::Int(0));
    let got = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(got, ("send_sync".to_owned(), Value::Int(3)));
    // A memory topic is not a UI message: refused, and the worker is ended. The reader ends
    // it on its own thread, so the call's reply may come first or the lane may close first.
    let (got, _) = call(
        &w,
        &mut host,
        2,
        "post",
        sent("telemetry", Value::None),
        None,
    );
    if let Ok(ended) = got {
        assert_eq!(replied(Ok(ended)), Value::Int(0));
    }
    let refused = reader.join().unwrap().expect("refused");
    assert!(refused.to_string().contains("events lane"), "{refused}");
    assert!(w.wait_exit(Duration::from_secs(5)).is_some());
}

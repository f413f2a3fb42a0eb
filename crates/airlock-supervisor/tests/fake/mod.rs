//! A worker without Python for the tests of this crate: the test binary re-executes itself
//! (its `fake_worker` entry, which calls [`main`], runs only when `AIRLOCK_FAKE_WORKER` is
//! set), connects like the Python runtime, and runs the supervisor's own call loop
//! ([`airlock_supervisor::serve`]) with a [`Runner`] in plain Rust. [`TestHost`] is the host's
//! side of a call ([`airlock_supervisor::CallHost`]), also without Python.
#![allow(dead_code)]

use std::io::BufRead;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_shm::PoolConfig;
use airlock_supervisor::{
    CallHost, CallLane, CommandResult, ModelHandler, OutputSink, Runner, SIGNAL_FD, SignalPage,
    Stream, WorkerIdentity, WorkerSpec,
};
use airlock_wire::{
    Admission, Answer, LoadRequest, ModelKind, ModelOp, ModelOutcome, ModelRow, Notice, Question,
    RemoteException, Setting, Token, Value, WorkerReport,
};

/// Collects the worker's output lines.
#[derive(Default)]
pub struct Collect(pub Mutex<Vec<String>>);

impl OutputSink for Collect {
    fn emit(&self, _worker: &str, _stream: &Stream, line: &str) {
        self.0.lock().unwrap().push(line.to_owned());
    }
}

/// Whether this process is the fake worker (then the host-side tests return at once).
pub fn is_worker() -> bool {
    std::env::var("AIRLOCK_FAKE_WORKER").is_ok()
}

/// A fake worker of this test binary, started in `mode`.
pub fn spec(mode: &str) -> WorkerSpec {
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

/// A report with `seq` and one model row per id in `models`.
pub fn report(seq: u64, models: &[u64]) -> WorkerReport {
    WorkerReport {
        pid: std::process::id(),
        seq,
        reserved: 0,
        models: models
            .iter()
            .map(|&id| ModelRow {
                id,
                name: format!("m{id}"),
                kind: ModelKind::Module,
                device: "cuda:0".into(),
                size: id * 10,
                resident: id * 10,
                seq,
                last_used: 0.0,
                in_use: false,
            })
            .collect(),
        pinned: 0,
        rss: Some(1 << 20),
        floor: None,
        device_uuid: None,
    }
}

/// The load every `admit` call asks about.
pub fn load() -> LoadRequest {
    LoadRequest {
        device: "cuda:0".into(),
        need: 3 << 30,
        minimum: 1 << 30,
        models: vec![3],
    }
}

/// The worker side. A no-op unless this binary was started as a fake worker.
pub fn main() {
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
    let Ok(airlock_supervisor::Connected {
        call: lane,
        route,
        events,
        control,
        ..
    }) = connected
    else {
        std::process::exit(2);
    };
    control.publish(report(1, &[]));
    control.set_handler(Arc::new(FakeModels));
    eprintln!("fake worker ready");
    // The route lane's calls run on a thread of their own, beside the call lane's.
    std::thread::spawn(move || {
        let calls = airlock_supervisor::CallState::new();
        let mut runner = FakeRunner {
            lane: route.clone(),
            events: None,
            current: &calls,
            resolved: Vec::new(),
        };
        let _ = airlock_supervisor::serve(&route, &calls, &mut runner);
    });
    let calls = airlock_supervisor::CallState::new();
    let mut runner = FakeRunner {
        lane: lane.clone(),
        events: Some(events),
        current: &calls,
        resolved: Vec::new(),
    };
    let served = airlock_supervisor::serve(&lane, &calls, &mut runner);
    std::process::exit(if served.is_ok() { 0 } else { 3 });
}

/// The fake worker's targets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    /// Returns its positional arguments.
    Echo,
    /// SIGTERM to itself, as a crash.
    Die,
    /// Sleeps 30 s.
    Sleep,
    /// Waits for the host's interrupt through the signal page, then returns "interrupted".
    Spin,
    /// Raises `boom`.
    Fail,
    /// Asks the host to admit [`load`] and returns `(granted, hold)`, or the host's reason.
    Admit,
    /// Sends a loaded notice and a telemetry report, then returns 0.
    Notify,
    /// Asks `double?` with its first argument (a question as an event); returns the answer.
    Double,
    /// Returns how many targets were resolved so far (resolution is cached per name).
    Resolved,
    /// Sends its first argument as topic and its second as payload on the events lane, as
    /// a call-less event (id 0); returns 0.
    Post,
}

struct FakeRunner<'a> {
    lane: Arc<CallLane>,
    /// The events lane (the call lane's runner only).
    events: Option<Arc<CallLane>>,
    current: &'a airlock_supervisor::CallState,
    resolved: Vec<String>,
}

impl Runner for FakeRunner<'_> {
    type Args = Value;
    type Target = Target;
    type Error = String;

    fn blocking<T: Send>(&mut self, wait: impl FnOnce() -> T + Send) -> T {
        wait()
    }

    fn decode_args(&mut self, args: Value, _kwargs: Value) -> Result<Value, String> {
        Ok(args)
    }

    fn resolve(&mut self, target: &str) -> Result<Target, String> {
        self.resolved.push(target.to_owned());
        Ok(match target {
            "echo" => Target::Echo,
            "die" => Target::Die,
            "sleep" => Target::Sleep,
            "spin" => Target::Spin,
            "fail" => Target::Fail,
            "admit" => Target::Admit,
            "notify" => Target::Notify,
            "double" => Target::Double,
            "resolved" => Target::Resolved,
            "post" => Target::Post,
            other => return Err(format!("no target {other:?}")),
        })
    }

    fn invoke(&mut self, target: &Target, args: Value) -> Result<Value, String> {
        let id = self.current.current();
        match target {
            Target::Echo => Ok(args),
            Target::Die => {
                eprintln!("dying on purpose");
                // SIGTERM rather than abort: no core file, whatever the ulimit.
                // SAFETY: raising a signal at ourselves.
                unsafe { libc::raise(libc::SIGTERM) };
                Ok(Value::None)
            }
            Target::Sleep => {
                std::thread::sleep(Duration::from_secs(30));
                Ok(Value::None)
            }
            Target::Spin => {
                spin(id);
                Ok(Value::Str("interrupted".into()))
            }
            Target::Fail => Err("boom".into()),
            Target::Admit => {
                let answer = airlock_supervisor::ask(&self.lane, id, Question::Admit(load()))
                    .map_err(|e| format!("{e:?}"))?;
                Ok(match answer {
                    Answer::Decided(a) => Value::Tuple(vec![
                        Value::Bool(a.granted),
                        a.hold.map_or(Value::None, |h| Value::Int(h as i64)),
                    ]),
                    Answer::Unanswered { reason } => Value::Str(reason),
                })
            }
            Target::Notify => {
                for notice in [
                    Notice::Loaded { holds: vec![1, 2] },
                    Notice::Telemetry(report(2, &[3])),
                ] {
                    self.lane
                        .send(&airlock_wire::Message::Notice { id, notice })
                        .map_err(|e| e.to_string())?;
                }
                Ok(Value::Int(0))
            }
            Target::Double => {
                let payload = match args {
                    Value::Tuple(mut v) if !v.is_empty() => v.remove(0),
                    other => other,
                };
                let topic = "double?".to_owned();
                self.lane
                    .send(&airlock_wire::Message::Event {
                        id,
                        topic: topic.clone(),
                        payload,
                    })
                    .map_err(|e| e.to_string())?;
                airlock_supervisor::await_answer(&self.lane, id, &topic)
                    .map_err(|e| format!("{e:?}"))
            }
            Target::Resolved => Ok(Value::Int(self.resolved.len() as i64)),
            Target::Post => {
                let Value::Tuple(mut v) = args else {
                    return Err("post takes (topic, payload)".into());
                };
                let payload = v.pop().unwrap_or(Value::None);
                let Some(Value::Str(topic)) = v.pop() else {
                    return Err("post takes (topic, payload)".into());
                };
                let events = self.events.as_ref().ok_or("no events lane here")?;
                let msg = airlock_wire::Message::Event {
                    id: 0,
                    topic,
                    payload,
                };
                events.send(&msg).map_err(|e| e.to_string())?;
                Ok(Value::Int(0))
            }
        }
    }

    fn describe(&mut self, error: String) -> Result<RemoteException, String> {
        Ok(RemoteException {
            module: "fake".into(),
            qualname: "Error".into(),
            message: error,
            args: Value::Tuple(Vec::new()),
            traceback: String::new(),
        })
    }
}

/// A node that checks for interrupts the way ComfyUI's do, through the page the host handed
/// over.
fn spin(id: u64) {
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
}

/// The fake worker's models: model `m` frees `m * 10` bytes, except model 0, which is busy.
struct FakeModels;

impl ModelHandler for FakeModels {
    fn run(&self, model: u64, op: ModelOp) -> CommandResult {
        let outcome = match (model, op) {
            (0, _) => ModelOutcome::Refused {
                reason: "in use".into(),
            },
            (m, ModelOp::Unload) => ModelOutcome::Done { bytes: m * 10 },
            (_, ModelOp::PartiallyUnload { bytes }) => ModelOutcome::Done { bytes },
            (_, ModelOp::PartiallyLoad { extra }) => ModelOutcome::Done {
                bytes: extra.max(0.0) as u64,
            },
        };
        (outcome, Some(report(10 + model, &[model])))
    }

    fn set(&self, setting: Setting) -> CommandResult {
        let (Setting::PinCeiling { bytes } | Setting::CacheHeadroom { bytes }) = setting;
        (ModelOutcome::Done { bytes }, Some(report(99, &[])))
    }
}

/// What the host's side of a call saw, for the assertions.
#[derive(Debug, Default, PartialEq)]
pub struct Seen {
    pub events: Vec<(String, Value)>,
    pub questions: Vec<Question>,
    pub notices: Vec<Notice>,
    pub interrupt_checks: usize,
}

/// The host's side of a call, in plain Rust: values stay values, `double?` is answered with
/// twice its integer, admissions are granted with hold 9 (or refused: `unanswered`), and a
/// handler fails for events or notices when told to.
#[derive(Default)]
pub struct TestHost {
    pub seen: Seen,
    /// `interrupted()` answers true from this many checks on (None: never).
    pub interrupt_after: Option<usize>,
    pub fail_events: bool,
    pub unanswered: bool,
}

impl CallHost for TestHost {
    type Decoded = Value;
    type Error = String;

    fn blocking<T: Send>(&mut self, wait: impl FnOnce() -> T + Send) -> T {
        wait()
    }

    fn interrupted(&mut self) -> bool {
        self.seen.interrupt_checks += 1;
        self.interrupt_after
            .is_some_and(|n| self.seen.interrupt_checks > n)
    }

    fn decode(&mut self, value: Value) -> Result<Value, String> {
        Ok(value)
    }

    fn event(&mut self, topic: String, payload: Value) -> Result<(), String> {
        self.seen.events.push((topic.clone(), payload));
        if self.fail_events {
            return Err(format!("handler of {topic} failed"));
        }
        Ok(())
    }

    fn answer(&mut self, topic: &str, payload: Result<Value, String>) -> Value {
        self.seen
            .events
            .push((topic.to_owned(), payload.clone().unwrap_or(Value::None)));
        match payload {
            Ok(Value::Int(i)) if topic == "double?" => Value::Int(2 * i),
            _ => Value::Str(format!("cannot answer {topic}")),
        }
    }

    fn ask(&mut self, question: Question) -> Answer {
        let need = match &question {
            Question::Admit(r) | Question::Oom(r) => r.need,
        };
        self.seen.questions.push(question);
        if self.unanswered {
            return Answer::Unanswered {
                reason: "no bridge".into(),
            };
        }
        Answer::Decided(Admission {
            granted: true,
            hold: Some(9),
            need,
            free_before: 4 << 30,
            held: 0,
            free: 4 << 30,
        })
    }

    fn notice(&mut self, notice: Notice) -> Result<(), String> {
        self.seen.notices.push(notice);
        if self.fail_events {
            return Err("notice handler failed".into());
        }
        Ok(())
    }
}

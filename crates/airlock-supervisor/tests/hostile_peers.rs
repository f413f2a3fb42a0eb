//! Hostile peers at the handshake, with real processes: this test binary re-executes itself as
//! the "worker" (the `hostile_worker` entry runs only when `AIRLOCK_HOSTILE` is set) and speaks
//! raw frames. Every refusal must be a typed `SpawnError` and be counted by reason in
//! `airlock_supervisor::rejections()`.

use std::io::{BufRead, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_shm::PoolConfig;
use airlock_supervisor::{
    OutputSink, Rejection, SpawnError, Stream, WorkerProcess, WorkerSpec, rejections,
};
use airlock_wire::{HandshakeError, Hello, Lane, Message, PROTOCOL_VERSION, Token, encode_frame};

struct Quiet;

impl OutputSink for Quiet {
    fn emit(&self, _worker: &str, _stream: &Stream, _line: &str) {}
}

/// The counters are process-wide and tests run on parallel threads: each test that reads a
/// delta holds this.
static SERIAL: Mutex<()> = Mutex::new(());

fn count(r: Rejection) -> u64 {
    rejections().iter().find(|(k, _)| *k == r).unwrap().1
}

fn spec(mode: &str) -> WorkerSpec {
    WorkerSpec {
        name: format!("hostile-{mode}"),
        python: std::env::current_exe().unwrap(),
        args: [
            "hostile_worker",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ]
        .iter()
        .map(Into::into)
        .collect(),
        env: vec![("AIRLOCK_HOSTILE".into(), mode.into())],
        cwd: None,
        connect_timeout: Duration::from_secs(20),
        liveness: None,
        pool: PoolConfig::default(),
    }
}

fn hello(token: Token, lane: Lane, pid: u32, protocol: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let h = Hello {
        protocol,
        token,
        lane,
        pid,
        python: "hostile".into(),
        torch: None,
        numpy: None,
    };
    encode_frame(&Message::Hello(h), &mut out).unwrap();
    out
}

fn parse_token(hex: &str) -> Token {
    let mut t = [0u8; 32];
    for (i, b) in t.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    Token(t)
}

/// The "worker" side. A no-op unless this binary was started as a hostile worker.
#[test]
fn hostile_worker() {
    let Ok(mode) = std::env::var("AIRLOCK_HOSTILE") else {
        return;
    };
    let socket = std::env::var("AIRLOCK_SOCKET").unwrap();
    let me = std::process::id();
    let token = if mode == "foreign-child" {
        parse_token(&std::env::var("AIRLOCK_STOLEN_TOKEN").unwrap())
    } else {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).unwrap();
        parse_token(line.trim())
    };
    let send = |bytes: &[u8]| {
        let mut s = UnixStream::connect(&socket).unwrap();
        s.write_all(bytes).unwrap();
        s
    };
    let _kept = match mode.as_str() {
        "old-protocol" => vec![send(&hello(token, Lane::Call, me, PROTOCOL_VERSION + 1))],
        "lying-pid" => vec![send(&hello(token, Lane::Call, me + 1, PROTOCOL_VERSION))],
        "not-hello" => {
            let mut ping = Vec::new();
            encode_frame(&Message::Ping { seq: 1 }, &mut ping).unwrap();
            vec![send(&ping)]
        }
        "call-twice" => vec![
            send(&hello(token, Lane::Call, me, PROTOCOL_VERSION)),
            send(&hello(token, Lane::Call, me, PROTOCOL_VERSION)),
        ],
        "oversize-hello" => vec![send(&u32::MAX.to_le_bytes())],
        "foreign" => {
            // Hands the token to another process, which connects claiming to be us.
            let hex: String = token.0.iter().map(|b| format!("{b:02x}")).collect();
            let status = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "hostile_worker",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("AIRLOCK_HOSTILE", "foreign-child")
                .env("AIRLOCK_CLAIMED_PID", me.to_string())
                .env("AIRLOCK_STOLEN_TOKEN", hex)
                .status();
            drop(status);
            vec![]
        }
        "foreign-child" => {
            let claimed: u32 = std::env::var("AIRLOCK_CLAIMED_PID")
                .unwrap()
                .parse()
                .unwrap();
            let s = send(&hello(token, Lane::Call, claimed, PROTOCOL_VERSION));
            std::thread::sleep(Duration::from_millis(500));
            vec![s]
        }
        other => panic!("unknown mode {other}"),
    };
    // Linger until the host has judged us (it kills us when it refuses).
    std::thread::sleep(Duration::from_secs(20));
    std::process::exit(0);
}

fn refused(mode: &str) -> SpawnError {
    match WorkerProcess::spawn(&spec(mode), 1, Arc::new(Quiet)) {
        Ok(_) => panic!("the host accepted a hostile worker ({mode})"),
        Err(e) => e,
    }
}

#[test]
fn another_protocol_version_is_refused_and_counted() {
    if std::env::var("AIRLOCK_HOSTILE").is_ok() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let before = count(Rejection::VersionMismatch);
    let e = refused("old-protocol");
    assert!(
        matches!(
            e,
            SpawnError::Handshake(HandshakeError::VersionMismatch { .. })
        ),
        "{e}"
    );
    assert!(e.to_string().contains("protocol version"), "{e}");
    assert_eq!(count(Rejection::VersionMismatch), before + 1);
}

#[test]
fn a_hello_claiming_another_pid_is_refused_and_counted() {
    if std::env::var("AIRLOCK_HOSTILE").is_ok() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let before = count(Rejection::PidMismatch);
    let e = refused("lying-pid");
    assert!(
        matches!(e, SpawnError::Handshake(HandshakeError::PidMismatch { .. })),
        "{e}"
    );
    assert_eq!(count(Rejection::PidMismatch), before + 1);
}

#[test]
fn a_first_frame_that_is_not_a_hello_is_refused_and_counted() {
    if std::env::var("AIRLOCK_HOSTILE").is_ok() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let before = count(Rejection::Protocol);
    let e = refused("not-hello");
    assert!(e.to_string().contains("expected Hello"), "{e}");
    assert_eq!(count(Rejection::Protocol), before + 1);
}

#[test]
fn a_lane_opened_twice_is_refused_and_counted() {
    if std::env::var("AIRLOCK_HOSTILE").is_ok() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let before = count(Rejection::Protocol);
    let e = refused("call-twice");
    assert!(e.to_string().contains("Call lane opened twice"), "{e}");
    assert_eq!(count(Rejection::Protocol), before + 1);
}

#[test]
fn an_oversize_hello_is_refused_from_its_header_and_counted() {
    if std::env::var("AIRLOCK_HOSTILE").is_ok() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let before = count(Rejection::FrameTooLarge);
    let e = refused("oversize-hello");
    assert!(e.to_string().contains("exceeds the limit"), "{e}");
    assert_eq!(count(Rejection::FrameTooLarge), before + 1);
}

#[test]
fn another_process_with_the_token_is_refused_and_counted() {
    if std::env::var("AIRLOCK_HOSTILE").is_ok() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let before = count(Rejection::ForeignPeer);
    let e = refused("foreign");
    assert!(matches!(e, SpawnError::ForeignPeer { .. }), "{e}");
    assert!(e.to_string().contains("not the worker we started"), "{e}");
    assert_eq!(count(Rejection::ForeignPeer), before + 1);
}

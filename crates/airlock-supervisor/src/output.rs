//! Worker output: stdout, stderr and logging records, each on its own pipe and thread, so a
//! chatty worker never slows the call lane.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Which pipe a line came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
    /// A `logging` record from the worker, with its level number and logger name.
    Log {
        level: i32,
        logger: String,
    },
}

/// Where worker output goes (the Python layer forwards it to `logging`).
pub trait OutputSink: Send + Sync {
    fn emit(&self, worker: &str, stream: &Stream, line: &str);
}

const TAIL_LINES: usize = 20;

/// The last lines of a worker's stderr, for crash reports.
#[derive(Default)]
pub(crate) struct Tail {
    lines: Mutex<(VecDeque<String>, bool)>,
    closed: Condvar,
}

impl Tail {
    fn push(&self, line: &str) {
        let mut g = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        if g.0.len() == TAIL_LINES {
            g.0.pop_front();
        }
        g.0.push_back(line.to_owned());
    }

    fn close(&self) {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.closed.notify_all();
    }

    /// The tail, after waiting up to `wait` for the pipe to reach its end (so the last words
    /// of a dying worker are in it).
    pub fn snapshot(&self, wait: Duration) -> Vec<String> {
        let g = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        let (g, _) = self
            .closed
            .wait_timeout_while(g, wait, |(_, closed)| !*closed)
            .unwrap_or_else(|p| p.into_inner());
        g.0.iter().cloned().collect()
    }
}

/// Forwards every line of `pipe` to `sink` on a new thread.
pub(crate) fn forward(
    worker: String,
    kind: Stream,
    pipe: impl Read + Send + 'static,
    sink: Arc<dyn OutputSink>,
    tail: Option<Arc<Tail>>,
) {
    let spawned = std::thread::Builder::new()
        .name(format!("airlock-out-{worker}"))
        .spawn(move || {
            let mut reader = BufReader::new(pipe);
            let mut raw = Vec::new();
            loop {
                raw.clear();
                match reader.read_until(b'\n', &mut raw) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let text = String::from_utf8_lossy(&raw);
                let line = text.trim_end_matches(['\n', '\r']);
                if let Some(t) = &tail {
                    t.push(line);
                }
                match &kind {
                    Stream::Log { .. } => {
                        let (stream, msg) = parse_record(line);
                        sink.emit(&worker, &stream, &msg);
                    }
                    k => sink.emit(&worker, k, line),
                }
            }
            if let Some(t) = &tail {
                t.close();
            }
        });
    if spawned.is_err() {
        // No thread, no forwarding; the pipe closes and the worker sees EPIPE on output.
    }
}

/// A record line is `level \t logger \t message`, with the message's newlines sent as NUL.
fn parse_record(line: &str) -> (Stream, String) {
    let mut parts = line.splitn(3, '\t');
    let level = parts.next().and_then(|l| l.parse().ok());
    let logger = parts.next();
    let msg = parts.next();
    match (level, logger, msg) {
        (Some(level), Some(logger), Some(msg)) => (
            Stream::Log {
                level,
                logger: logger.to_owned(),
            },
            msg.replace('\0', "\n"),
        ),
        _ => (Stream::Stderr, line.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse_and_garbage_falls_back_to_stderr() {
        let (s, m) = parse_record("30\tpack.nodes\tfirst\0second");
        assert_eq!(
            s,
            Stream::Log {
                level: 30,
                logger: "pack.nodes".into()
            }
        );
        assert_eq!(m, "first\nsecond");
        assert_eq!(parse_record("not a record").0, Stream::Stderr);
    }
}

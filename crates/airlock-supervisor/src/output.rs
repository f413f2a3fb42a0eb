//! Worker output: stdout, stderr and logging records, each on its own pipe and thread, so a
//! chatty worker never slows the call lane.
//!
//! Output is the worker's to choose, bytes and all: lines are decoded lossily, and a line is
//! forwarded up to [`MAX_LINE`] bytes, the rest of it dropped (and said so), so a worker that
//! writes without newlines cannot make the host buffer without bound.

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

/// Longest line forwarded, in bytes.
pub const MAX_LINE: usize = 64 << 10;

/// Reads one line into `raw` (at most [`MAX_LINE`] bytes of it); returns how many bytes of a
/// longer line were skipped, or `None` at the end of the pipe.
fn read_line(reader: &mut impl BufRead, raw: &mut Vec<u8>) -> std::io::Result<Option<usize>> {
    raw.clear();
    let n = reader
        .by_ref()
        .take(MAX_LINE as u64)
        .read_until(b'\n', raw)?;
    if n == 0 {
        return Ok(None);
    }
    if n < MAX_LINE || raw.last() == Some(&b'\n') {
        return Ok(Some(0));
    }
    let mut dropped = 0;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            dropped += i;
            reader.consume(i + 1);
            break;
        }
        let l = buf.len();
        dropped += l;
        reader.consume(l);
    }
    Ok(Some(dropped))
}

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
            while let Ok(Some(dropped)) = read_line(&mut reader, &mut raw) {
                let text = String::from_utf8_lossy(&raw);
                let mut line = text.trim_end_matches(['\n', '\r']).to_owned();
                if dropped > 0 {
                    line.push_str(&format!(" [... {dropped} more bytes of this line dropped]"));
                }
                let line = line.as_str();
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
    fn long_lines_are_cut_and_the_next_line_is_intact() {
        let mut input = vec![b'x'; MAX_LINE * 3 + 5];
        input.extend_from_slice(b"\nnext\n");
        input.extend_from_slice(&[0xff; 10]); // no newline before the end
        let mut r = BufReader::with_capacity(1000, &input[..]);
        let mut raw = Vec::new();
        assert_eq!(read_line(&mut r, &mut raw).unwrap(), Some(MAX_LINE * 2 + 5));
        assert_eq!(raw.len(), MAX_LINE);
        assert_eq!(read_line(&mut r, &mut raw).unwrap(), Some(0));
        assert_eq!(raw, b"next\n");
        assert_eq!(read_line(&mut r, &mut raw).unwrap(), Some(0));
        assert_eq!(raw, [0xff; 10]);
        assert_eq!(read_line(&mut r, &mut raw).unwrap(), None);
    }

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

//! Worker output: stdout, stderr and logging records, each on its own pipe and thread, so a
//! chatty worker never slows the call lane.
//!
//! Output is the worker's to choose, bytes and all: lines are decoded lossily, and a line is
//! forwarded up to [`MAX_LINE`] bytes, the rest of it dropped (and said so), so a worker that
//! writes without newlines cannot make the host buffer without bound.
//!
//! A progress bar (tqdm's, as a model download or a sampler draws it) redraws one line in
//! place: `\r` and the new state, many times a second, and `\n` only when it closes. In a
//! terminal, natively, the user watches it move. Read as lines, a worker's bar came as one line
//! at its end, cut at [`MAX_LINE`] (the newest states dropped): minutes of silence during a
//! download, then a heap of states. On stdout and stderr a piece ended by `\r` is a redraw
//! ([`Redraws`]): the newest is forwarded as a line at most once per [`REDRAW_EVERY`], and the
//! line that closes the bar always. A piece is judged when the next one arrives (a `\r` may
//! begin a `\r\n`), so a program that ends its state with `\r` and then works in silence shows
//! that state late; tqdm begins each state with `\r` and is not delayed.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

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

/// How often a redrawn line (a progress bar) is forwarded at most.
pub const REDRAW_EVERY: Duration = Duration::from_secs(2);

/// What ended a piece of output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// `\n`, or the end of the pipe.
    Line,
    /// `\r`: the line is drawn again from its start.
    Redraw,
}

/// Reads one piece into `raw` (at most [`MAX_LINE`] bytes of it, its end byte included),
/// ended by `\n`, or also by `\r` when `redraws`; returns how it ended and how many bytes of
/// a longer piece were skipped, or `None` at the end of the pipe.
fn read_piece(
    reader: &mut impl BufRead,
    raw: &mut Vec<u8>,
    redraws: bool,
) -> std::io::Result<Option<(End, usize)>> {
    let is_end = |b: u8| b == b'\n' || (redraws && b == b'\r');
    raw.clear();
    let mut dropped = 0;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok((!raw.is_empty() || dropped > 0).then_some((End::Line, dropped)));
        }
        let found = buf.iter().position(|&b| is_end(b));
        let content = found.unwrap_or(buf.len());
        let kept = content.min(MAX_LINE.saturating_sub(raw.len()));
        raw.extend_from_slice(&buf[..kept]);
        dropped += content - kept;
        let end = found.map(|i| buf[i]);
        reader.consume(content + usize::from(end.is_some()));
        if let Some(b) = end {
            raw.push(b);
            let end = if b == b'\r' { End::Redraw } else { End::Line };
            return Ok(Some((end, dropped)));
        }
    }
}

/// Turns pieces of output into the lines to forward. A piece ended by `\r` is held: followed by
/// an empty line it was a `\r\n` line ending; followed by another piece it was a redraw, and the
/// newest redraw is forwarded once [`REDRAW_EVERY`] has passed since the last; a line ended by
/// `\n` replaces a held redraw (a bar's last state comes with its `\n`). Pure: the caller
/// reads and gives the time.
#[derive(Default)]
pub(crate) struct Redraws {
    held: Option<String>,
    last: Option<Instant>,
}

impl Redraws {
    /// The lines to forward after a piece `text` ended by `end`, read at `now`.
    fn piece(&mut self, text: String, end: End, now: Instant) -> Vec<String> {
        let mut out = Vec::new();
        match end {
            End::Line => match self.held.take() {
                Some(held) if text.is_empty() => out.push(held), // a `\r\n` ending
                _ => out.push(text),
            },
            End::Redraw => {
                if let Some(held) = self.held.take() {
                    let due = self
                        .last
                        .is_none_or(|t| now.duration_since(t) >= REDRAW_EVERY);
                    if due && !held.trim().is_empty() {
                        self.last = Some(now);
                        out.push(held);
                    }
                }
                self.held = Some(text);
            }
        }
        out
    }

    /// What is left when the pipe ends: a held piece, ended by `\r` and nothing after.
    fn finish(&mut self) -> Option<String> {
        self.held.take().filter(|h| !h.trim().is_empty())
    }
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
            // Records are one per line, whatever their text holds.
            let redraws = !matches!(kind, Stream::Log { .. });
            let mut pieces = Redraws::default();
            let emit = |line: &str| {
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
            };
            while let Ok(Some((end, dropped))) = read_piece(&mut reader, &mut raw, redraws) {
                let (line, end) = line_of(&raw, end, dropped);
                for line in pieces.piece(line, end, Instant::now()) {
                    emit(&line);
                }
            }
            if let Some(line) = pieces.finish() {
                emit(&line);
            }
            if let Some(t) = &tail {
                t.close();
            }
        });
    if spawned.is_err() {
        // No thread, no forwarding; the pipe closes and the worker sees EPIPE on output.
    }
}

/// The text of a piece read into `raw`, and how it is judged. A piece cut at [`MAX_LINE`] says
/// how much of it was dropped, and is a line even when a `\r` ended it: no progress bar draws
/// 64 KiB states, and a redraw may be replaced by the next unseen, which would lose the only
/// word that bytes were dropped.
fn line_of(raw: &[u8], end: End, dropped: usize) -> (String, End) {
    let text = String::from_utf8_lossy(raw);
    let mut line = text.trim_end_matches(['\n', '\r']).to_owned();
    if dropped == 0 {
        return (line, end);
    }
    line.push_str(&format!(" [... {dropped} more bytes of this line dropped]"));
    (line, End::Line)
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
        let line = Some((End::Line, 0));
        assert_eq!(
            read_piece(&mut r, &mut raw, true).unwrap(),
            Some((End::Line, MAX_LINE * 2 + 5))
        );
        assert_eq!(raw.len(), MAX_LINE + 1);
        assert_eq!(read_piece(&mut r, &mut raw, true).unwrap(), line);
        assert_eq!(raw, b"next\n");
        assert_eq!(read_piece(&mut r, &mut raw, true).unwrap(), line);
        assert_eq!(raw, [0xff; 10]);
        assert_eq!(read_piece(&mut r, &mut raw, true).unwrap(), None);
    }

    #[test]
    fn a_return_ends_a_piece_only_where_redraws_are_read() {
        let input = b"a\rb\r\nc\n";
        let mut raw = Vec::new();
        let mut r = BufReader::new(&input[..]);
        let mut pieces = Vec::new();
        while let Some((end, _)) = read_piece(&mut r, &mut raw, true).unwrap() {
            pieces.push((String::from_utf8_lossy(&raw).into_owned(), end));
        }
        let want = [
            ("a\r", End::Redraw),
            ("b\r", End::Redraw),
            ("\n", End::Line),
        ];
        assert_eq!(pieces[..3], want.map(|(t, e)| (t.to_owned(), e)));
        assert_eq!(pieces[3], ("c\n".to_owned(), End::Line));
        let mut r = BufReader::new(&input[..]);
        assert_eq!(
            read_piece(&mut r, &mut raw, false).unwrap(),
            Some((End::Line, 0))
        );
        assert_eq!(raw, b"a\rb\r\n");
    }

    /// The lines `Redraws` forwards for `pieces`, each read `gap` after the one before.
    fn forwarded(pieces: &[(&str, End)], gap: Duration) -> Vec<String> {
        let mut r = Redraws::default();
        let t0 = Instant::now();
        let mut out = Vec::new();
        for (i, (text, end)) in pieces.iter().enumerate() {
            out.extend(r.piece((*text).to_owned(), *end, t0 + gap * i as u32));
        }
        out.extend(r.finish());
        out
    }

    #[test]
    fn a_progress_bar_is_forwarded_as_it_moves_and_its_last_state_always() {
        use End::{Line, Redraw};
        // tqdm: `\r` before each state, `\n` when it closes.
        let mut bar = vec![("", Redraw)];
        let states: Vec<String> = (0..=100).map(|p| format!("{p:3}%|")).collect();
        bar.extend(states[..100].iter().map(|s| (s.as_str(), Redraw)));
        bar.push((states[100].as_str(), Line));
        // A state every 0.1 s: one line per REDRAW_EVERY (2 s), then the closing state.
        let out = forwarded(&bar, Duration::from_millis(100));
        assert_eq!(out.first().map(String::as_str), Some("  0%|"));
        assert_eq!(out.last().map(String::as_str), Some("100%|"));
        assert_eq!(out.len(), 6, "{out:?}"); // 0%, 20%, 40%, 60%, 80%, then 100%
        assert!(out.windows(2).all(|w| w[0] < w[1]));
        // Drawn fast (all within REDRAW_EVERY): the first state and the closing one.
        let out = forwarded(&bar, Duration::ZERO);
        assert_eq!(out, ["  0%|", "100%|"]);
    }

    #[test]
    fn a_cut_line_ended_by_a_return_is_forwarded_even_between_redraws() {
        // A bar moving, then an endless line that a later `\r` ends, then more redraws, all
        // within REDRAW_EVERY: the cut line, and the word that bytes were dropped, come out.
        let mut input = b"\r 1%|\r 2%|\r".to_vec();
        input.extend(vec![b'x'; MAX_LINE + 10]);
        input.extend_from_slice(b"\r 3%|\r 4%|\r");
        let mut r = BufReader::new(&input[..]);
        let mut raw = Vec::new();
        let mut pieces = Redraws::default();
        let (t0, mut out) = (Instant::now(), Vec::new());
        while let Some((end, dropped)) = read_piece(&mut r, &mut raw, true).unwrap() {
            let (line, end) = line_of(&raw, end, dropped);
            assert!(dropped == 0 || end == End::Line);
            out.extend(pieces.piece(line, end, t0));
        }
        out.extend(pieces.finish());
        assert!(
            out.iter()
                .any(|l| l.ends_with("[... 10 more bytes of this line dropped]")),
            "{:?}",
            out.iter()
                .map(|l| &l[..l.len().min(40)])
                .collect::<Vec<_>>()
        );
        assert_eq!(out.first().map(String::as_str), Some(" 1%|"));
    }

    #[test]
    fn crlf_lines_plain_lines_and_a_trailing_redraw_are_forwarded_whole() {
        use End::{Line, Redraw};
        let out = forwarded(
            &[
                ("one", Redraw),
                ("", Line),
                ("two", Line),
                ("", Line),
                ("last", Redraw),
            ],
            Duration::ZERO,
        );
        assert_eq!(out, ["one", "two", "", "last"]);
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

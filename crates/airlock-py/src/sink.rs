//! Worker output into Python's `logging`, through the `log` hook.

use airlock_supervisor::{OutputSink, Stream};
use std::io::Write;

pub struct PyLogSink;

impl OutputSink for PyLogSink {
    fn emit(&self, worker: &str, stream: &Stream, line: &str) {
        let (kind, level, logger) = match stream {
            Stream::Stdout => ("stdout", 20, ""),
            Stream::Stderr => ("stderr", 30, ""),
            Stream::Log { level, logger } => ("log", *level, logger.as_str()),
        };
        let logged = crate::exit_gate::with_python(|py| {
            if let Ok(h) = crate::hooks::hooks(py) {
                let _ = h.log.call1(py, (worker, kind, level, logger, line));
            }
        });
        // Python is exiting (the gate is shut): the line still reaches the terminal, as
        // `[worker/logger] line` like the log hook writes it, at ComfyUI's default level.
        if logged.is_none() && level >= 20 {
            let who = if logger.is_empty() {
                worker.to_owned()
            } else {
                format!("{worker}/{logger}")
            };
            // One write for the whole line: the process may end between two writes.
            let _ = std::io::stderr().write_all(format!("[{who}] {line}\n").as_bytes());
        }
    }
}

//! Worker output into Python's `logging`, through the `log` hook.

use airlock_supervisor::{OutputSink, Stream};
use pyo3::prelude::*;

pub struct PyLogSink;

impl OutputSink for PyLogSink {
    fn emit(&self, worker: &str, stream: &Stream, line: &str) {
        let (kind, level, logger) = match stream {
            Stream::Stdout => ("stdout", 20, ""),
            Stream::Stderr => ("stderr", 30, ""),
            Stream::Log { level, logger } => ("log", *level, logger.as_str()),
        };
        // At interpreter shutdown there is no one left to log to.
        let _ = Python::try_attach(|py| {
            if let Ok(h) = crate::hooks::hooks(py) {
                let _ = h.log.call1(py, (worker, kind, level, logger, line));
            }
        });
    }
}

//! Telling the user what a build is doing.
//!
//! Building an env with torch in it takes minutes, and a silent ComfyUI start looks hung. On a
//! terminal a spinner shows the phase ("resolving", "creating venv with Python 3.10.13",
//! "installing 42 packages") and uv's latest line. Elsewhere (a log file, ComfyUI's own log,
//! CI) only the phase lines go out, one per line, through whatever the caller gives us.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Receives a build's progress. Called from the building thread.
pub trait Progress: Send + Sync {
    /// A new phase of the pack's build began.
    fn phase(&self, pack: &str, phase: &str);
    /// A line of uv's output.
    fn output(&self, _pack: &str, _line: &str) {}
    /// The pack's build is over (successfully or not).
    fn finish(&self, _pack: &str) {}
}

/// Says nothing.
pub struct Silent;

impl Progress for Silent {
    fn phase(&self, _pack: &str, _phase: &str) {}
}

/// Hands each phase to a function as one line: `"<pack>: <phase>"`.
pub struct Lines<F>(pub F);

impl<F: Fn(&str) + Send + Sync> Progress for Lines<F> {
    fn phase(&self, pack: &str, phase: &str) {
        (self.0)(&format!("{pack}: {phase}"));
    }
}

/// A spinner on stderr with the phase and uv's latest line.
pub struct Spinner {
    state: Mutex<SpinnerState>,
}

struct SpinnerState {
    bar: Option<ProgressBar>,
    prefix: String,
}

impl Spinner {
    pub fn new() -> Spinner {
        Spinner {
            state: Mutex::new(SpinnerState {
                bar: None,
                prefix: String::new(),
            }),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut SpinnerState) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Default for Spinner {
    fn default() -> Self {
        Spinner::new()
    }
}

impl Progress for Spinner {
    fn phase(&self, pack: &str, phase: &str) {
        self.with(|s| {
            let bar = s.bar.get_or_insert_with(|| {
                let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
                let style = ProgressStyle::with_template("{spinner} {elapsed:>4} {wide_msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner());
                bar.set_style(style);
                bar.enable_steady_tick(Duration::from_millis(120));
                bar
            });
            s.prefix = format!("{pack}: {phase}");
            bar.set_message(s.prefix.clone());
        });
    }

    fn output(&self, _pack: &str, line: &str) {
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        self.with(|s| {
            if let Some(bar) = &s.bar {
                let short: String = line.chars().take(80).collect();
                bar.set_message(format!("{} · {short}", s.prefix));
            }
        });
    }

    fn finish(&self, _pack: &str) {
        self.with(|s| {
            if let Some(bar) = s.bar.take() {
                bar.finish_and_clear();
            }
        });
    }
}

/// Whether stderr is a terminal (where a spinner is wanted).
pub fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[test]
    fn lines_get_pack_and_phase() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        let p = Lines(move |l: &str| g.lock().unwrap().push(l.to_string()));
        p.phase("depth", "resolving");
        p.output("depth", "Resolved 3 packages");
        p.finish("depth");
        assert_eq!(*got.lock().unwrap(), ["depth: resolving"]);
    }

    #[test]
    fn spinner_without_terminal_does_not_panic() {
        let s = Spinner::new();
        s.phase("p", "resolving");
        s.output("p", "line");
        s.finish("p");
    }
}

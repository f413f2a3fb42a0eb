//! Running a short-lived child (an interpreter probe) with a time limit.
//!
//! A probe of a broken interpreter, or of an env whose `import torch` hangs on a wedged
//! driver, must not hang `airlock doctor` or ComfyUI's start: past the limit the child is
//! killed and the caller gets [`Ran::TimedOut`].

use std::io::{self, Read};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How a child run ended.
#[derive(Debug)]
pub enum Ran {
    Exited {
        status: ExitStatus,
        stdout: String,
        stderr: String,
    },
    TimedOut,
}

/// Runs `cmd` with stdin closed, collecting its output, killing it after `limit`.
pub fn run_with_timeout(mut cmd: Command, limit: Duration) -> io::Result<Ran> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let collect = |mut r: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = child.stdout.take().map(|s| collect(Box::new(s)));
    let err = child.stderr.take().map(|s| collect(Box::new(s)));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(5));
    };
    let join = |h: Option<thread::JoinHandle<String>>| {
        h.map(|h| h.join().unwrap_or_default()).unwrap_or_default()
    };
    let (stdout, stderr) = (join(out), join(err));
    Ok(match status {
        Some(status) => Ran::Exited {
            status,
            stdout,
            stderr,
        },
        None => Ran::TimedOut,
    })
}

/// The last `n` non-empty lines of `text`, in order.
pub fn last_lines(text: &str, n: usize) -> Vec<String> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| l.to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collects_output_and_kills_on_timeout() {
        let mut c = Command::new("sh");
        c.args(["-c", "echo out; echo err >&2; exit 3"]);
        match run_with_timeout(c, Duration::from_secs(10)).unwrap() {
            Ran::Exited {
                status,
                stdout,
                stderr,
            } => {
                assert_eq!(status.code(), Some(3));
                assert_eq!(stdout, "out\n");
                assert_eq!(stderr, "err\n");
            }
            Ran::TimedOut => panic!("timed out"),
        }
        let mut c = Command::new("sleep");
        c.arg("10");
        let t = Instant::now();
        assert!(matches!(
            run_with_timeout(c, Duration::from_millis(100)).unwrap(),
            Ran::TimedOut
        ));
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}

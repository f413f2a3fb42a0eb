//! Finding the `uv` binary and running it with its output logged and watched.
//!
//! uv comes from the `uv` wheel on PyPI, installed next to comfy-airlock; we never download it.
//! Order: an explicit path, [`UV_ENV`], the path the Python side learnt from the `uv`
//! package, `uv` next to the running Python, `uv` on `PATH`. An explicit path or [`UV_ENV`]
//! that does not work is an error rather than a reason to look elsewhere: whoever set it meant
//! that binary.
//!
//! Every line uv prints goes to the pack's log file and to the progress display; stderr is also
//! kept, so that a failure can quote uv's own message (its `error:` block) instead of the
//! whole log.

use std::env;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::thread;

use crate::error::BuildError;
use crate::progress::Progress;

/// The variable naming the uv binary to use (read here only).
pub const UV_ENV: &str = "AIRLOCK_UV";
/// Where uv is looked for, in the words of the `airlock` command's help.
pub const UV_DEFAULTS: &str = "$AIRLOCK_UV, else the `uv` package's, else PATH";

/// Where to look for uv.
#[derive(Debug, Default, Clone)]
pub struct UvLocator {
    /// Given by the caller (`uv=` or `--uv`): used or an error, nothing else is tried.
    pub explicit: Option<PathBuf>,
    /// What the Python side found through the `uv` package (`uv.find_uv_bin()`).
    pub from_package: Option<PathBuf>,
    /// The running Python; `uv` next to it is tried.
    pub host_python: Option<PathBuf>,
}

impl UvLocator {
    pub fn locate(&self) -> Result<Uv, BuildError> {
        let mut searched = Vec::new();
        let env_uv = env::var_os(UV_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        if let Some(strict) = self.explicit.clone().or(env_uv) {
            if is_executable(&strict) {
                return Ok(Uv::new(strict));
            }
            return Err(BuildError::UvNotFound {
                searched: vec![strict.display().to_string()],
            });
        }
        let beside = self
            .host_python
            .as_ref()
            .and_then(|p| p.parent())
            .map(|d| d.join("uv"));
        let on_path = env::var_os("PATH")
            .map(|p| {
                env::split_paths(&p)
                    .map(|d| d.join("uv"))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        for cand in self
            .from_package
            .iter()
            .cloned()
            .chain(beside)
            .chain(on_path)
        {
            if is_executable(&cand) {
                return Ok(Uv::new(cand));
            }
            searched.push(cand.display().to_string());
        }
        searched.dedup();
        if searched.is_empty() {
            searched.push("PATH (unset)".into());
        }
        Err(BuildError::UvNotFound { searched })
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The uv binary.
#[derive(Debug, Clone)]
pub struct Uv {
    pub path: PathBuf,
    version: OnceLock<Option<String>>,
}

/// What a finished uv command left behind.
#[derive(Debug)]
pub struct UvOutput {
    pub success: bool,
    pub stdout: String,
    pub stderr: Vec<String>,
}

impl UvOutput {
    /// The part of uv's stderr that explains a failure: from its first `error:` line to the
    /// end, or the last lines when it printed none.
    pub fn message(&self) -> Vec<String> {
        relevant_tail(&self.stderr)
    }
}

/// See [`UvOutput::message`].
pub fn relevant_tail(stderr: &[String]) -> Vec<String> {
    let lines: Vec<&String> = stderr.iter().filter(|l| !l.trim().is_empty()).collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with("error:") || l.trim_start().starts_with('×'))
        .unwrap_or(lines.len().saturating_sub(15));
    lines[start..]
        .iter()
        .take(40)
        .map(|l| l.trim_end().to_string())
        .collect()
}

/// Where a run's output goes: the pack's log file (truncated when first written in a build)
/// and the progress display.
pub struct RunLog<'a> {
    pub pack: &'a str,
    pub path: PathBuf,
    pub progress: &'a dyn Progress,
    file: Mutex<Option<File>>,
}

impl<'a> RunLog<'a> {
    pub fn new(pack: &'a str, path: PathBuf, progress: &'a dyn Progress) -> RunLog<'a> {
        RunLog {
            pack,
            path,
            progress,
            file: Mutex::new(None),
        }
    }

    /// Appends a line to the log (opening it, truncated, on the first line).
    pub fn write(&self, line: &str) {
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            if let Some(dir) = self.path.parent() {
                let _ = fs::create_dir_all(dir);
            }
            *f = File::create(&self.path).ok();
        }
        if let Some(f) = f.as_mut() {
            let _ = writeln!(f, "{line}");
        }
    }

    pub fn phase(&self, phase: &str) {
        self.write(&format!("== {phase}"));
        self.progress.phase(self.pack, phase);
    }
}

impl Uv {
    pub fn new(path: PathBuf) -> Uv {
        Uv {
            path,
            version: OnceLock::new(),
        }
    }

    /// `uv --version`'s version, e.g. "0.13.9".
    pub fn version(&self) -> Option<&str> {
        self.version
            .get_or_init(|| {
                let out = Command::new(&self.path).arg("--version").output().ok()?;
                let text = String::from_utf8_lossy(&out.stdout);
                text.split_whitespace().nth(1).map(str::to_string)
            })
            .as_deref()
    }

    /// A uv command with plain output, run from `cwd` (so no project's uv config applies).
    pub fn command<S: AsRef<OsStr>>(&self, args: &[S], cwd: &Path) -> Command {
        let mut c = Command::new(&self.path);
        c.args(args)
            .args(["--color", "never", "--no-progress"])
            .current_dir(cwd)
            .env_remove("VIRTUAL_ENV")
            .env_remove("CONDA_PREFIX")
            .stdin(Stdio::null());
        c
    }

    /// Runs uv quietly and returns its output (for quick queries such as `python find`).
    pub fn query<S: AsRef<OsStr>>(&self, args: &[S], cwd: &Path) -> Result<UvOutput, BuildError> {
        let out = self
            .command(args, cwd)
            .output()
            .map_err(|source| BuildError::UvSpawn {
                uv: self.path.clone(),
                source,
            })?;
        Ok(UvOutput {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr)
                .lines()
                .map(str::to_string)
                .collect(),
        })
    }

    /// Runs uv with every output line sent to `log` (and so to the progress display).
    pub fn run<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        cwd: &Path,
        log: &RunLog<'_>,
    ) -> Result<UvOutput, BuildError> {
        let shown: Vec<String> = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect();
        log.write(&format!("$ {} {}", self.path.display(), shown.join(" ")));
        let spawn_err = |source| BuildError::UvSpawn {
            uv: self.path.clone(),
            source,
        };
        let mut child = self
            .command(args, cwd)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn_err)?;
        let out = child.stdout.take();
        let err = child.stderr.take();
        let (stdout, stderr) = thread::scope(|s| {
            let o = s.spawn(|| out.map(|o| pump(o, log, false)).unwrap_or_default());
            let e = s.spawn(|| err.map(|e| pump(e, log, true)).unwrap_or_default());
            (o.join().unwrap_or_default(), e.join().unwrap_or_default())
        });
        let status = child.wait().map_err(spawn_err)?;
        log.write(&format!("(exit: {status})"));
        Ok(UvOutput {
            success: status.success(),
            stdout: stdout.join("\n"),
            stderr,
        })
    }
}

/// Reads lines (uv redraws with `\r` too) into the log; keeps them all for the caller.
fn pump(r: impl Read, log: &RunLog<'_>, is_stderr: bool) -> Vec<String> {
    let mut kept = Vec::new();
    let mut reader = BufReader::new(r);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&buf);
        for line in text.split(['\r', '\n']).filter(|l| !l.is_empty()) {
            log.write(line);
            if is_stderr {
                log.progress.output(log.pack, line);
            }
            kept.push(line.to_string());
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::Silent;

    #[test]
    fn tail_starts_at_uv_error() {
        let lines: Vec<String> = [
            "Resolved 2 packages",
            "",
            "error: No solution found",
            "  cause: x",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            relevant_tail(&lines),
            ["error: No solution found", "  cause: x"]
        );
        let many: Vec<String> = (0..30).map(|i| format!("line {i}")).collect();
        assert_eq!(relevant_tail(&many).len(), 15);
    }

    #[test]
    fn explicit_uv_that_does_not_exist_is_an_error() {
        let l = UvLocator {
            explicit: Some("/nonexistent/uv".into()),
            ..Default::default()
        };
        let e = l.locate().unwrap_err();
        assert!(e.to_string().contains("/nonexistent/uv"), "{e}");
    }

    #[test]
    fn runs_a_program_and_logs_its_lines() {
        let d = tempfile::tempdir().unwrap();
        let script = d.path().join("fake-uv");
        fs::write(
            &script,
            "#!/bin/sh\necho out\necho 'a\rb' >&2\necho 'error: bad' >&2\nexit 2\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
        let uv = UvLocator {
            explicit: Some(script),
            ..Default::default()
        }
        .locate()
        .unwrap();
        let log = RunLog::new("p", d.path().join("logs/p.log"), &Silent);
        let out = uv.run(&["pip", "compile"], d.path(), &log).unwrap();
        assert!(!out.success);
        assert_eq!(out.stdout, "out");
        assert_eq!(out.stderr, ["a", "b", "error: bad"]);
        assert_eq!(out.message(), ["error: bad"]);
        let text = fs::read_to_string(d.path().join("logs/p.log")).unwrap();
        assert!(
            text.contains("pip compile --color never") || text.contains("pip compile"),
            "{text}"
        );
        assert!(
            text.contains("error: bad") && text.contains("(exit:"),
            "{text}"
        );
    }
}

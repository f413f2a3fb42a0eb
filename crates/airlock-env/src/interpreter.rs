//! Finding the Python interpreter a pack asks for.
//!
//! The request (`python = "3.10"`, absent for the host's own) is met, in order, by: the host
//! interpreter; `pythonX.Y` on `PATH`; pyenv's versions; uv's managed Pythons; `python3` on
//! `PATH`; an interpreter uv found for the same request before (remembered under the home);
//! `uv python find`; and finally `uv python install` (unless `UV_PYTHON_DOWNLOADS=never`).
//! Each candidate is run once to read its real version (names lie: a pyenv shim is called
//! `python3.10` whether or not 3.10 is selected), and the answers are remembered for the life
//! of the process. An interpreter that is already installed is thus found without running uv.

use std::collections::HashMap;
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::error::{BuildError, IoOp, ProbeError};
use crate::hash::sha256_hex;
use crate::home::Home;
use crate::pyversion::{PythonRequest, release_of};
use crate::record::{read_json, write_json};
use crate::uv::{RunLog, Uv};

/// An interpreter and what running it told us.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interpreter {
    /// The path we run (as found, not resolved: a venv's `bin/python` must stay that).
    pub path: PathBuf,
    /// `sys.implementation.name`, e.g. "cpython".
    pub implementation: String,
    /// `platform.python_version()`, e.g. "3.10.13".
    pub version: String,
    /// `sysconfig.get_platform()` and `sys.abiflags`, e.g. "linux-x86_64".
    pub platform: String,
    pub abiflags: String,
}

impl Interpreter {
    pub fn release(&self) -> Vec<u64> {
        release_of(&self.version)
    }

    /// "CPython 3.10.13".
    pub fn describe(&self) -> String {
        let name = match self.implementation.as_str() {
            "cpython" => "CPython",
            "pypy" => "PyPy",
            other => other,
        };
        format!("{name} {}", self.version)
    }
}

const PROBE: &str = "import json, platform, sys, sysconfig\n\
print(json.dumps({'implementation': sys.implementation.name, \
'version': platform.python_version(), 'platform': sysconfig.get_platform(), \
'abiflags': getattr(sys, 'abiflags', '')}))";

#[derive(Deserialize)]
struct ProbeAnswer {
    implementation: String,
    version: String,
    platform: String,
    abiflags: String,
}

type Memo = Mutex<HashMap<(PathBuf, Option<SystemTime>), Result<Interpreter, String>>>;

fn memo() -> &'static Memo {
    static MEMO: OnceLock<Memo> = OnceLock::new();
    MEMO.get_or_init(Default::default)
}

/// Runs `path` to learn its implementation, version and platform.
pub fn probe(path: &Path) -> Result<Interpreter, ProbeError> {
    let stamp = fs::metadata(path).and_then(|m| m.modified()).ok();
    let key = (path.to_path_buf(), stamp);
    if let Some(known) = memo().lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return known.clone().map_err(ProbeError::Earlier);
    }
    let result = probe_uncached(path);
    let stored = result.as_ref().map_err(|e| e.to_string()).cloned();
    memo()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, stored);
    result
}

fn probe_uncached(path: &Path) -> Result<Interpreter, ProbeError> {
    use crate::run::{Ran, last_lines, run_with_timeout};
    let mut cmd = Command::new(path);
    cmd.args(["-I", "-c", PROBE]);
    let limit = 30;
    match run_with_timeout(cmd, Duration::from_secs(limit)).map_err(ProbeError::Spawn)? {
        Ran::TimedOut => Err(ProbeError::Timeout(limit)),
        Ran::Exited {
            status,
            stdout,
            stderr,
        } => {
            if !status.success() {
                return Err(ProbeError::Failed {
                    status: status.to_string(),
                    stderr: last_lines(&stderr, 3),
                });
            }
            let line = stdout.lines().last().unwrap_or("");
            let a: ProbeAnswer =
                serde_json::from_str(line).map_err(|_| ProbeError::Output(stdout.clone()))?;
            Ok(Interpreter {
                path: path.to_path_buf(),
                implementation: a.implementation,
                version: a.version,
                platform: a.platform,
                abiflags: a.abiflags,
            })
        }
    }
}

/// How an interpreter may be looked for.
pub struct Finder<'a> {
    pub home: &'a Home,
    pub host_python: Option<&'a Path>,
    /// uv, when it can be found; without it only installed interpreters are found.
    pub uv: Option<&'a Uv>,
    /// Whether `uv python install` may download a Python (only when building).
    pub may_install: bool,
    pub log: Option<&'a RunLog<'a>>,
}

impl Finder<'_> {
    /// The interpreter for `request` (`None`: the host's).
    pub fn find(&self, request: Option<&str>) -> Result<Interpreter, BuildError> {
        let Some(text) = request else {
            let host = self
                .host_python
                .map(Path::to_path_buf)
                .or_else(|| on_path("python3"))
                .unwrap_or_else(|| PathBuf::from("python3"));
            return probe(&host).map_err(|source| BuildError::Interpreter { path: host, source });
        };
        let req = PythonRequest::parse(text);
        if let PythonRequest::Path(p) = &req {
            return probe(p).map_err(|source| BuildError::Interpreter {
                path: p.clone(),
                source,
            });
        }
        if let Some(found) = self.installed(&req) {
            return Ok(found);
        }
        let remembered = self
            .home
            .pythons()
            .join(format!("{}.json", &sha256_hex(text.as_bytes())[..16]));
        if let Some(r) = read_json::<Remembered>(&remembered) {
            if let Ok(i) = probe(&r.path) {
                if req.matches(&i.release()) != Some(false) {
                    return Ok(i);
                }
            }
        }
        let found = self.ask_uv(text, &req)?;
        let _ = fs::create_dir_all(self.home.pythons());
        write_json(
            &remembered,
            &Remembered {
                request: text.to_string(),
                path: found.path.clone(),
            },
        )
        .map_err(BuildError::io(IoOp::Write, &remembered))?;
        Ok(found)
    }

    /// The first installed interpreter that meets `req`, without running uv.
    fn installed(&self, req: &PythonRequest) -> Option<Interpreter> {
        if matches!(req, PythonRequest::Other(_)) {
            return None;
        }
        let host = self.host_python.map(|h| (h.to_path_buf(), Vec::new()));
        host.into_iter()
            .chain(candidates())
            .filter(|(_, hint)| req.could_match(hint))
            .find_map(|(path, _)| {
                let i = probe(&path).ok()?;
                (req.matches(&i.release()) == Some(true)).then_some(i)
            })
    }

    fn ask_uv(&self, text: &str, req: &PythonRequest) -> Result<Interpreter, BuildError> {
        let not_found = |uv_message: Vec<String>| BuildError::InterpreterNotFound {
            request: text.to_string(),
            uv_message,
        };
        let Some(uv) = self.uv else {
            return Err(not_found(Vec::new()));
        };
        let cwd = self.home.root();
        let _ = fs::create_dir_all(cwd);
        let find = |managed: bool| -> Result<Result<Interpreter, Vec<String>>, BuildError> {
            let mut args = vec!["python", "find", "--no-project"];
            if managed {
                args.push("--managed-python");
            }
            args.push(text);
            let out = uv.query(&args, cwd)?;
            let path = out.stdout.lines().next().unwrap_or("").trim();
            if !out.success || path.is_empty() {
                return Ok(Err(out.message()));
            }
            let path = PathBuf::from(path);
            Ok(match probe(&path) {
                Ok(i) if req.matches(&i.release()) != Some(false) => Ok(i),
                Ok(i) => Err(vec![format!(
                    "uv offered {} ({})",
                    path.display(),
                    i.version
                )]),
                Err(e) => Err(vec![format!("uv offered {}: {e}", path.display())]),
            })
        };
        let mut message = match find(false)? {
            Ok(i) => return Ok(i),
            Err(m) => m,
        };
        let downloads_off = env::var("UV_PYTHON_DOWNLOADS").is_ok_and(|v| v == "never");
        if let (true, false, Some(log)) = (self.may_install, downloads_off, self.log) {
            log.phase(&format!(
                "no installed Python matches {text:?}; trying `uv python install`"
            ));
            let out = uv.run(&["python", "install", text], cwd, log)?;
            if out.success {
                match find(true)? {
                    Ok(i) => return Ok(i),
                    Err(m) => message = m,
                }
            } else {
                message.extend(out.message());
            }
        }
        message.dedup();
        Err(not_found(message))
    }
}

#[derive(Serialize, Deserialize)]
struct Remembered {
    request: String,
    path: PathBuf,
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Interpreters on this machine, each with what its name says of its version, in the order
/// they are preferred.
fn candidates() -> Vec<(PathBuf, Vec<u64>)> {
    let mut versioned = Vec::new();
    let mut generic = Vec::new();
    let path_dirs: Vec<PathBuf> = env::var_os("PATH")
        .map(|p| env::split_paths(&p).collect())
        .unwrap_or_default();
    for dir in &path_dirs {
        let Ok(entries) = fs::read_dir(dir) else {
            continue;
        };
        let mut found: Vec<(PathBuf, Vec<u64>)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let ver = name.strip_prefix("python")?;
                let release = release_of(ver);
                (release.len() == 2 && format!("{}.{}", release[0], release[1]) == ver)
                    .then(|| (e.path(), release))
            })
            .collect();
        found.sort_by(|a, b| b.1.cmp(&a.1));
        versioned.extend(found);
        for name in ["python3", "python"] {
            let p = dir.join(name);
            if p.is_file() {
                generic.push((p, Vec::new()));
            }
        }
    }
    let home = env::var_os("HOME").map(PathBuf::from);
    let pyenv_roots: Vec<PathBuf> = env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .into_iter()
        .chain(home.as_ref().map(|h| h.join(".pyenv")))
        .collect();
    for root in pyenv_roots {
        versioned.extend(versions_in(&root.join("versions"), |name| {
            let r = release_of(name);
            (r.len() >= 2 && name.starts_with(|c: char| c.is_ascii_digit()))
                .then(|| (format!("bin/python{}.{}", r[0], r[1]), r))
        }));
    }
    let uv_dir = env::var_os("UV_PYTHON_INSTALL_DIR")
        .map(PathBuf::from)
        .or_else(|| env::var_os("XDG_DATA_HOME").map(|d| PathBuf::from(d).join("uv/python")))
        .or_else(|| home.map(|h| h.join(".local/share/uv/python")));
    if let Some(dir) = uv_dir {
        versioned.extend(versions_in(&dir, |name| {
            let r = release_of(name.strip_prefix("cpython-")?);
            (r.len() >= 2).then(|| ("bin/python3".to_string(), r))
        }));
    }
    versioned.into_iter().chain(generic).collect()
}

/// Interpreters in the sub-folders of `dir` (newest first) whose names `parse` understands.
fn versions_in(
    dir: &Path,
    parse: impl Fn(&str) -> Option<(String, Vec<u64>)>,
) -> Vec<(PathBuf, Vec<u64>)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, Vec<u64>)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let (rel, release) = parse(&e.file_name().to_string_lossy())?;
            let p = e.path().join(rel);
            p.is_file().then_some((p, release))
        })
        .collect();
    out.sort_by(|a, b| b.1.cmp(&a.1));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> PathBuf {
        // The interpreter the workspace's tests run with, when there is one.
        let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
        if venv.exists() {
            venv
        } else {
            on_path("python3").expect("python3 on PATH")
        }
    }

    #[test]
    fn probes_an_interpreter_and_remembers() {
        let i = probe(&host()).unwrap();
        assert_eq!(i.implementation, "cpython");
        assert!(i.release().len() >= 2, "{i:?}");
        assert!(!i.platform.is_empty());
        assert_eq!(probe(&host()).unwrap(), i);
        assert!(probe(Path::new("/nonexistent/python")).is_err());
    }

    #[test]
    fn host_is_used_without_a_request_and_for_a_matching_one() {
        let d = tempfile::tempdir().unwrap();
        let home = Home::new(d.path());
        let h = host();
        let f = Finder {
            home: &home,
            host_python: Some(&h),
            uv: None,
            may_install: false,
            log: None,
        };
        let i = f.find(None).unwrap();
        assert_eq!(i.path, h);
        let minor = format!("{}.{}", i.release()[0], i.release()[1]);
        assert_eq!(f.find(Some(&minor)).unwrap().path, h);
        let e = f.find(Some("3.4")).unwrap_err();
        assert!(e.to_string().contains("python = \"3.4\""), "{e}");
    }
}

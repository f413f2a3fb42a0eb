//! The conda side of an env (ADR 0024): a pack with conda packages gets a conda prefix for an
//! env, Python from conda included, and its PyPI requirements installed by uv into that same
//! prefix.
//!
//! - **Plan**: the conda request (the pack's packages plus `python`: its `[dependencies]`
//!   python, else its `python` version as `X.Y.*`, else the host's `X.Y.*`), described into
//!   the inputs hash (channels by URL, specs, virtual packages).
//! - **Resolve** (under the resolution's lock): rattler solves; the answer is
//!   `<resolution>/conda-lock.json`. The lock is installed into a scratch prefix there, whose
//!   Python `uv pip compile` resolves the PyPI requirements for, with the Python distributions
//!   conda put there as constraints (what pixi does: conda's numpy is the numpy); the scratch
//!   prefix is removed.
//! - **Key**: the env key hashes the PyPI lock and the conda lock together.
//! - **Build**: the machine is checked against `[system-requirements]`; the conda lock is
//!   installed into the env's folder (hard links from rattler's package cache under
//!   `<home>/conda/pkgs`), then `uv pip install --no-deps` of the PyPI lock (not `sync`, which
//!   would remove conda's Python packages).

use std::fs;
use std::path::{Path, PathBuf};

use airlock_conda::{CondaLock, CondaRequest, CondaSpec};

use crate::config::PackConfig;
use crate::error::{BuildError, IoOp};
use crate::interpreter::Interpreter;
use crate::record::write_atomic;
use crate::uv::{RunLog, Uv};

/// A resolution's conda lock.
pub const CONDA_LOCK: &str = "conda-lock.json";
/// The Python distributions conda installed, as `name==version` constraints for uv.
const CONDA_PROVIDED: &str = "conda-provided.txt";

/// What conda is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CondaPlan {
    pub request: CondaRequest,
    /// The env's Python `major.minor` (or the request, when it is a range).
    pub python: String,
}

/// The conda plan of `config`, if it has conda packages; `host` is the host's interpreter.
pub fn plan(config: &PackConfig, host: &Interpreter) -> Option<CondaPlan> {
    let c = config.conda.as_ref()?;
    let host_minor = minor(&host.version).unwrap_or_else(|| host.version.clone());
    let spec = c
        .python
        .clone()
        .or_else(|| config.python.as_deref().map(as_conda_version))
        .unwrap_or_else(|| format!("{host_minor}.*"));
    let python = minor(&spec).unwrap_or(spec.clone());
    let mut specs = c.dependencies.clone();
    specs.push(CondaSpec::new("python", &spec));
    Some(CondaPlan {
        request: CondaRequest {
            channels: c.channels.clone(),
            specs,
            system: c.system.clone(),
            root_dir: config.dir.clone(),
        },
        python,
    })
}

/// A `python = "3.11"` request as a conda version: `3.11.*`.
fn as_conda_version(request: &str) -> String {
    let r = request.trim();
    if r.starts_with(|c: char| c.is_ascii_digit()) && r.split('.').count() == 2 && !r.contains('*')
    {
        format!("{r}.*")
    } else {
        r.to_string()
    }
}

/// `3.11` of `3.11.*`, `3.11.9`, `==3.11`; None for a range.
fn minor(v: &str) -> Option<String> {
    let v = v.trim().trim_start_matches("==");
    let parts: Vec<&str> = v.split('.').take(2).collect();
    (parts.len() == 2
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit())))
    .then(|| parts.join("."))
}

impl CondaPlan {
    /// The lines that go into the inputs hash.
    pub fn describe(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .request
            .all_channels()
            .iter()
            .map(|c| {
                let url = airlock_conda::channel_url(c, &self.request.root_dir)
                    .unwrap_or_else(|e| e.to_string());
                format!("conda-channel {url}")
            })
            .collect();
        let mut specs: Vec<String> = self
            .request
            .specs
            .iter()
            .map(|s| format!("conda {}", s.match_spec_text()))
            .collect();
        specs.sort();
        out.extend(specs);
        out.extend(
            self.request
                .system
                .describe()
                .into_iter()
                .map(|v| format!("conda-virtual {v}")),
        );
        out.push(format!(
            "conda-platform {}",
            airlock_conda::current_platform()
        ));
        out
    }

    /// What stands for the env's interpreter before conda has installed it: the Python
    /// version asked for, on the host's platform.
    pub fn interpreter(&self, host: &Interpreter) -> Interpreter {
        Interpreter {
            path: PathBuf::new(),
            implementation: "cpython".into(),
            version: self.python.clone(),
            platform: host.platform.clone(),
            abiflags: String::new(),
        }
    }
}

/// The text an env key hashes: the PyPI lock, and the conda lock when the resolution has one.
pub fn keyed_lock(resolution: &Path, pip_lock: &str) -> String {
    match fs::read_to_string(resolution.join(CONDA_LOCK)) {
        Ok(conda) => format!("{pip_lock}\n# conda lock\n{conda}"),
        Err(_) => pip_lock.to_string(),
    }
}

fn conda_err<'a>(log: &'a RunLog<'_>) -> impl Fn(airlock_conda::CondaError) -> BuildError + 'a {
    move |source| BuildError::Conda {
        source: Box::new(source),
        log: log.path.clone(),
    }
}

/// Solves and installs into a scratch prefix of the resolution; returns that prefix's Python
/// and the constraints file of what conda provides. The caller removes the prefix.
pub fn prepare_resolution(
    plan: &CondaPlan,
    resolution: &Path,
    cache: &Path,
    uv: &Uv,
    log: &RunLog<'_>,
) -> Result<(PathBuf, PathBuf), BuildError> {
    let report = |l: &str| log.phase(l);
    let lock = airlock_conda::solve(&plan.request, cache, &report).map_err(conda_err(log))?;
    let lock_path = resolution.join(CONDA_LOCK);
    let prefix = resolution.join(format!("prefix.{}", std::process::id()));
    let _ = fs::remove_dir_all(&prefix);
    airlock_conda::install(&lock, &prefix, cache, &report).map_err(conda_err(log))?;
    let python = prefix.join("bin").join("python");
    let args: Vec<std::ffi::OsString> = vec![
        "pip".into(),
        "list".into(),
        "--format".into(),
        "freeze".into(),
        "--python".into(),
        python.clone().into(),
    ];
    let out = uv.query(&args, resolution)?;
    let provided: String = out
        .stdout
        .lines()
        .filter(|l| l.contains("=="))
        .map(|l| format!("{}\n", l.trim()))
        .collect();
    let constraints = resolution.join(CONDA_PROVIDED);
    write_atomic(&constraints, provided.as_bytes())
        .map_err(BuildError::io(IoOp::Write, &constraints))?;
    // Written last: a resolution folder with a conda lock has all of it.
    write_atomic(&lock_path, lock.to_text().as_bytes())
        .map_err(BuildError::io(IoOp::Write, &lock_path))?;
    Ok((python, constraints))
}

/// The scratch prefix of [`prepare_resolution`], removed once uv has resolved with it.
pub fn scratch_prefix(python: &Path) -> Option<&Path> {
    python.parent()?.parent()
}

/// Installs the resolution's conda lock into `env_dir`, after checking the machine against
/// the pack's system requirements. Returns how many packages.
pub fn install_env(
    plan: &CondaPlan,
    resolution: &Path,
    env_dir: &Path,
    cache: &Path,
    host_cuda: Option<&str>,
    log: &RunLog<'_>,
) -> Result<usize, BuildError> {
    plan.request
        .system
        .check_host(host_cuda)
        .map_err(conda_err(log))?;
    let path = resolution.join(CONDA_LOCK);
    let text = fs::read_to_string(&path).map_err(BuildError::io(IoOp::Read, &path))?;
    let lock = CondaLock::from_text(&text, &path).map_err(conda_err(log))?;
    let report = |l: &str| log.phase(l);
    let n = airlock_conda::install(&lock, env_dir, cache, &report).map_err(conda_err(log))?;
    let copy = env_dir.join(CONDA_LOCK);
    write_atomic(&copy, text.as_bytes()).map_err(BuildError::io(IoOp::Write, &copy))?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_versions() {
        assert_eq!(as_conda_version("3.11"), "3.11.*");
        assert_eq!(as_conda_version("3.11.9"), "3.11.9");
        assert_eq!(as_conda_version(">=3.10"), ">=3.10");
        assert_eq!(minor("3.11.*").as_deref(), Some("3.11"));
        assert_eq!(minor("==3.12.1").as_deref(), Some("3.12"));
        assert_eq!(minor(">=3.10,<3.13"), None);
    }
}

//! What can go wrong with a pack's config and its environment.
//!
//! Every message starts with the pack's name, because a ComfyUI user sees these in a log with
//! dozens of packs in it. A config error names the file, the line and the key; a build error
//! names the requirement uv complained about when it can find one, carries the relevant tail
//! of uv's own message, and points at the log with the whole of uv's output.

use std::fmt;
use std::io;
use std::path::PathBuf;

use thiserror::Error;

use crate::comfy::ComfyReason;
use crate::home::HOME_ENV;
use crate::uv::UV_ENV;

/// A pack's config file is missing, unreadable or not valid.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("{pack}: no airlock.toml or comfy-env.toml in {}", dir.display())]
    NoConfig { pack: String, dir: PathBuf },
    #[error("{pack}: cannot read {}: {source}", file.display())]
    Read {
        pack: String,
        file: PathBuf,
        source: io::Error,
    },
    #[error("{pack}: {}:{line}: {message}", file.display())]
    Syntax {
        pack: String,
        file: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{pack}: {}:{line}: unknown key `{key}`{}", file.display(), in_table(table))]
    UnknownKey {
        pack: String,
        file: PathBuf,
        line: usize,
        key: String,
        table: Option<String>,
    },
    #[error("{pack}: {}:{line}: `{key}` must be {expected}, not {found}", file.display())]
    WrongType {
        pack: String,
        file: PathBuf,
        line: usize,
        key: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("{pack}: {}:{line}: `{key}` = {value:?}: {why}", file.display())]
    InvalidValue {
        pack: String,
        file: PathBuf,
        line: usize,
        key: String,
        value: String,
        why: &'static str,
    },
    #[error("{pack}: {}:{line}: [{section}] is not supported: {hint}", file.display())]
    Unsupported {
        pack: String,
        file: PathBuf,
        line: usize,
        section: String,
        hint: &'static str,
    },
}

impl ConfigError {
    /// The pack the error is about.
    pub fn pack(&self) -> &str {
        match self {
            ConfigError::NoConfig { pack, .. }
            | ConfigError::Read { pack, .. }
            | ConfigError::Syntax { pack, .. }
            | ConfigError::UnknownKey { pack, .. }
            | ConfigError::WrongType { pack, .. }
            | ConfigError::InvalidValue { pack, .. }
            | ConfigError::Unsupported { pack, .. } => pack,
        }
    }
}

fn in_table(table: &Option<String>) -> String {
    table
        .as_ref()
        .map(|t| format!(" in [{t}]"))
        .unwrap_or_default()
}

/// Why preparing a pack's environment failed.
#[derive(Debug, Error)]
pub enum EnvError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{pack}: {kind}")]
    Build { pack: String, kind: BuildError },
}

impl EnvError {
    pub fn build(pack: &str, kind: BuildError) -> EnvError {
        EnvError::Build {
            pack: pack.to_string(),
            kind,
        }
    }

    /// The pack the error is about.
    pub fn pack(&self) -> &str {
        match self {
            EnvError::Config(c) => c.pack(),
            EnvError::Build { pack, .. } => pack,
        }
    }

    /// The log with uv's whole output, for errors that come from uv.
    pub fn log(&self) -> Option<&PathBuf> {
        match self {
            EnvError::Build {
                kind:
                    BuildError::Resolve { log, .. }
                    | BuildError::Venv { log, .. }
                    | BuildError::Install { log, .. }
                    | BuildError::Conda { log, .. },
                ..
            } => Some(log),
            _ => None,
        }
    }

    /// The pack requirement uv's error is about, when one could be found in its message.
    pub fn requirement(&self) -> Option<&str> {
        match self {
            EnvError::Build {
                kind:
                    BuildError::Resolve { requirement, .. } | BuildError::Install { requirement, .. },
                ..
            } => requirement.as_deref(),
            _ => None,
        }
    }

    /// uv's own message (the relevant tail of its stderr), for errors that come from uv.
    pub fn uv_message(&self) -> Option<&[String]> {
        match self {
            EnvError::Build {
                kind:
                    BuildError::Resolve { uv_message, .. }
                    | BuildError::Venv { uv_message, .. }
                    | BuildError::Install { uv_message, .. }
                    | BuildError::InterpreterNotFound { uv_message, .. },
                ..
            } => Some(uv_message),
            _ => None,
        }
    }

    /// Whether this is "the environment is not built (or out of date)" rather than a failure.
    pub fn is_missing(&self) -> bool {
        matches!(
            self,
            EnvError::Build {
                kind: BuildError::Missing(_),
                ..
            }
        )
    }
}

/// The state of an environment that `build = false` found unusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReady {
    /// Never built for this pack.
    Missing,
    /// Built, but the pack's requirements (or interpreter) changed since.
    Stale,
    /// The env directory exists but cannot be used.
    Broken { env_dir: PathBuf, reason: String },
}

impl fmt::Display for NotReady {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotReady::Missing => write!(f, "its environment is not built"),
            NotReady::Stale => write!(
                f,
                "its environment is out of date (its config or requirements changed since it \
                 was built)"
            ),
            NotReady::Broken { env_dir, reason } => {
                write!(
                    f,
                    "its environment {} is broken ({reason})",
                    env_dir.display()
                )
            }
        }
    }
}

/// A file-system operation, for [`BuildError::Io`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    Create,
    Read,
    Write,
    Remove,
    Lock,
    Scan,
}

impl fmt::Display for IoOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IoOp::Create => "cannot create",
            IoOp::Read => "cannot read",
            IoOp::Write => "cannot write",
            IoOp::Remove => "cannot remove",
            IoOp::Lock => "cannot lock",
            IoOp::Scan => "cannot scan",
        })
    }
}

/// Why running a Python interpreter to learn its version failed.
#[derive(Debug, Error)]
pub enum ProbeError {
    #[error("cannot run it: {0}")]
    Spawn(io::Error),
    #[error("it did not answer within {0} s")]
    Timeout(u64),
    #[error("it exited with {status}{}", tail(stderr))]
    Failed { status: String, stderr: Vec<String> },
    #[error("unexpected output: {0:?}")]
    Output(String),
    /// A failure remembered from an earlier probe in this process.
    #[error("{0}")]
    Earlier(String),
}

/// Why building (or finding) one pack's environment failed. Wrapped in [`EnvError::Build`],
/// which puts the pack's name in front.
#[derive(Debug, Error)]
pub enum BuildError {
    #[error("{0}; run `airlock build` to build it")]
    Missing(NotReady),
    #[error(
        "no uv binary found (looked at: {}); install the `uv` package into this Python \
         (pip install uv) or set {UV_ENV}",
        list(searched)
    )]
    UvNotFound { searched: Vec<String> },
    #[error("cannot run uv at {}: {source}", uv.display())]
    UvSpawn { uv: PathBuf, source: io::Error },
    #[error(
        "no Python interpreter found for python = {request:?}{}",
        uv_says(uv_message)
    )]
    InterpreterNotFound {
        request: String,
        uv_message: Vec<String>,
    },
    #[error("cannot use the Python interpreter {}: {source}", path.display())]
    Interpreter { path: PathBuf, source: ProbeError },
    #[error(
        "{0}, so its environment needs ComfyUI's requirements, but no ComfyUI directory is \
         known; pass --comfyui DIR or set COMFYUI_DIR"
    )]
    NoComfyUi(ComfyReason),
    #[error("cannot read ComfyUI's requirements {}: {source}", path.display())]
    ComfyRequirements { path: PathBuf, source: io::Error },
    #[error(
        "resolving its requirements failed{}{}\nfull uv output: {}",
        about(requirement),
        uv_says(uv_message),
        log.display()
    )]
    Resolve {
        requirement: Option<String>,
        uv_message: Vec<String>,
        log: PathBuf,
    },
    #[error(
        "creating a venv with {} failed{}\nfull uv output: {}",
        python.display(),
        uv_says(uv_message),
        log.display()
    )]
    Venv {
        python: PathBuf,
        uv_message: Vec<String>,
        log: PathBuf,
    },
    #[error(
        "installing its packages failed{}{}\nfull uv output: {}",
        about(requirement),
        uv_says(uv_message),
        log.display()
    )]
    Install {
        requirement: Option<String>,
        uv_message: Vec<String>,
        log: PathBuf,
    },
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: IoOp,
        path: PathBuf,
        source: io::Error,
    },
    #[error("no place for environments: neither {HOME_ENV}, XDG_DATA_HOME nor HOME is set")]
    NoHome,
    /// Solving or installing its conda packages failed (the message names the channel, the
    /// package or the prefix).
    #[error("{source}\nfull log: {}", log.display())]
    Conda {
        source: Box<airlock_conda::CondaError>,
        log: PathBuf,
    },
    #[error(
        "[cuda] {package}: no prebuilt wheel of {package} for {wanted} at {index} (looked for \
         a wheel whose name carries those tags); set {wheels_env} to an index that has \
         one, or {version_env} to the CUDA version to match",
        wheels_env = crate::cuda_wheels::WHEELS_ENV,
        version_env = crate::cuda_wheels::VERSION_ENV
    )]
    CudaWheel {
        package: String,
        wanted: String,
        index: String,
    },
    #[error("[cuda] {package}: the wheel index {index} cannot be reached: {cause}")]
    CudaIndex {
        package: String,
        index: String,
        cause: String,
    },
}

impl BuildError {
    pub fn io(op: IoOp, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> BuildError {
        let path = path.into();
        move |source| BuildError::Io { op, path, source }
    }
}

fn about(requirement: &Option<String>) -> String {
    requirement
        .as_ref()
        .map(|r| format!(" (requirement `{r}`)"))
        .unwrap_or_default()
}

fn uv_says(lines: &[String]) -> String {
    if lines.is_empty() {
        return String::new();
    }
    let mut s = String::from("\nuv says:");
    for l in lines {
        s.push_str("\n    ");
        s.push_str(l);
    }
    s
}

fn tail(lines: &[String]) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        format!(": {}", lines.join(" | "))
    }
}

fn list(items: &[String]) -> String {
    items.join(", ")
}

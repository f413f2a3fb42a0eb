//! The sandbox a comfy-airlock worker applies to itself when its pack's `airlock.toml` says
//! `[sandbox] enabled = true`.
//!
//! Isolation alone runs a pack in another process of the **same user**: without a sandbox it
//! can read `~/.ssh`, write `~/.bashrc` or read the host's environment in `/proc`. This crate
//! narrows that with [Landlock](https://docs.kernel.org/userspace-api/landlock.html), which an
//! unprivileged process can apply to itself and never undo:
//!
//! - **files**: reads only under [`Rules::read`] (the env, the pack, ComfyUI, its folders) and
//!   [`Rules::system`] (libraries, a few `/etc` files, the worker's own `/proc` entry); writes
//!   only under [`Rules::write`] (ComfyUI's output and temp folders, the worker's private temp
//!   dir). Writable paths cannot be `execve`d from.
//! - **network** (`network = false`): TCP connect and bind refused by Landlock (ABI ≥ 4), and
//!   new IPv4, IPv6 and packet sockets (so UDP and raw sockets too, which Landlock does not
//!   cover before ABI 10) refused by a seccomp filter, which also refuses `io_uring_setup`
//!   (io_uring could open sockets without the `socket` system call).
//! - **signals and abstract UNIX sockets** (ABI ≥ 6): the worker cannot signal processes
//!   outside its sandbox (the host, other workers) or reach their abstract sockets.
//!
//! Rules hold for the calling thread and what it starts later. The worker applies them first
//! thing in `main`, while it has a single thread, before it imports ComfyUI or the pack. A pack
//! that asked for a sandbox never runs without it: every shortfall is a [`SandboxError`].
//!
//! Not covered (see `docs/security.md`): connecting to UNIX sockets by path (Landlock controls
//! that from ABI 9), reading what the rules allow, and the kernel itself.

mod error;
mod landlock_rules;
mod seccomp;
mod system;

#[cfg(test)]
mod escape_tests;

use std::path::PathBuf;

pub use error::SandboxError;

/// The paths a worker may use. Paths that do not exist are skipped (and reported).
#[derive(Debug, Clone, Default)]
pub struct Rules {
    /// Readable (and executable) trees.
    pub read: Vec<PathBuf>,
    /// Directories whose entries may be listed but not read (ComfyUI's folder, of which only
    /// some entries are readable: Python's importer lists a folder on `sys.path` before it
    /// finds anything in it).
    pub list: Vec<PathBuf>,
    /// Readable and writable trees, not executable.
    pub write: Vec<PathBuf>,
    /// Device files that may be read, written and `ioctl`ed (GPUs).
    pub devices: Vec<PathBuf>,
    /// Whether TCP/UDP may be used.
    pub network: bool,
}

impl Rules {
    /// What any CPython process needs to run, whatever its pack: see [`system`].
    pub fn system() -> Rules {
        system::rules()
    }

    /// Adds `other`'s paths to these.
    pub fn extend(&mut self, other: Rules) {
        self.read.extend(other.read);
        self.list.extend(other.list);
        self.write.extend(other.write);
        self.devices.extend(other.devices);
    }
}

/// What was enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The kernel's Landlock ABI.
    pub abi: u32,
    /// Whether every requested filesystem right is enforced (false on kernels older than
    /// ABI 5, where truncation or device `ioctl` are not controlled).
    pub fully_enforced: bool,
    pub network_blocked: bool,
    /// Signals and abstract UNIX sockets scoped to the sandbox (ABI ≥ 6).
    pub scoped: bool,
    /// Paths in the rules that do not exist here.
    pub skipped: Vec<PathBuf>,
}

/// The running kernel's Landlock ABI version; 0 when Landlock is not available.
pub fn abi() -> u32 {
    // SAFETY: the version query takes no pointer (NULL, size 0) and only returns a number.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(v).unwrap_or(0)
}

const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// Whether a sandbox with or without network can be applied on this kernel; returns its ABI.
/// The host calls this before it starts a sandboxed worker, so a missing feature is reported
/// as a configuration problem of the pack rather than as a worker that died at start.
pub fn check(network: bool) -> Result<u32, SandboxError> {
    let abi = abi();
    if abi == 0 {
        let reason = match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EOPNOTSUPP) => "it is built in but not enabled at boot",
            _ => "the kernel does not implement it",
        };
        return Err(SandboxError::Unavailable { reason });
    }
    if !network && abi < 4 {
        return Err(SandboxError::NoNetworkRules { abi });
    }
    Ok(abi)
}

/// Restricts the calling thread (and everything it starts from now on) to `rules`, for good.
pub fn apply(rules: &Rules) -> Result<Report, SandboxError> {
    let abi = check(rules.network)?;
    let mut report = landlock_rules::restrict(rules, abi)?;
    if !rules.network {
        seccomp::refuse_network_sockets().map_err(SandboxError::Seccomp)?;
        report.network_blocked = true;
    }
    Ok(report)
}

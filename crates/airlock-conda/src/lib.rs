//! Conda packages for comfy-airlock's pack environments, solved and installed with rattler (the
//! library pixi is built on).
//!
//! A pack written for comfy-env lists conda packages in its `comfy-env.toml` (`[dependencies]`,
//! `[target.<platform>.dependencies]`, channels in `[workspace]`, `[system-requirements]`). The
//! env builder (`airlock-env`) turns them into a [`CondaRequest`]; this crate
//!
//! 1. solves it ([`solve`]): the channels' repodata through rattler's gateway (cached under the
//!    caller's cache folder), the resolvo solver, virtual packages from the pack's system
//!    requirements; the answer is a [`CondaLock`], every package pinned by URL and hash;
//! 2. installs a lock into a prefix ([`install`]): packages downloaded once into a shared
//!    package cache and hard-linked into the prefix.
//!
//! Nothing here knows about packs beyond the name it is given for messages, about uv, or about
//! where environments live: `airlock-env` decides that (docs/adr/0024-conda-environments.md).
//! Every error names the channel, the package or the prefix it is about.

mod channels;
mod client;
mod error;
mod install;
mod lock;
mod request;
mod solve;
mod system;
#[cfg(feature = "test-channel")]
#[doc(hidden)]
pub mod testing;

pub use channels::{CHANNEL_ALIAS_ENV, DEFAULT_CHANNEL, channel_url};
pub use client::fetch_text;
pub use error::CondaError;
pub use install::install;
pub use lock::{CondaLock, LockedPackage};
pub use request::{CondaRequest, CondaSpec};
pub use solve::solve;
pub use system::{Libc, SystemRequirements, host_glibc, host_linux, virtual_packages};

/// What a conda step tells its caller while it runs (one line per step; the caller logs it).
pub trait Report {
    fn line(&self, line: &str);
}

impl<F: Fn(&str)> Report for F {
    fn line(&self, line: &str) {
        self(line)
    }
}

/// The platform (conda "subdir") this process runs on, e.g. `linux-64`.
pub fn current_platform() -> &'static str {
    rattler_conda_types::Subdir::current()
        .map(|s| s.as_str())
        .unwrap_or("unknown")
}

/// Runs a future on a fresh single-threaded runtime: the builder is synchronous and runs one
/// conda step at a time, so no runtime outlives the call.
pub(crate) fn block_on<F: std::future::Future>(f: F) -> Result<F::Output, CondaError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| CondaError::Runtime { source })?;
    Ok(rt.block_on(f))
}

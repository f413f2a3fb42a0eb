//! Why a sandbox could not be applied. A pack that asked for one never runs without it: each
//! of these stops the worker before any of the pack's code is imported.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum SandboxError {
    #[error(
        "[sandbox] is enabled, but Landlock is not available on this kernel ({reason}); it needs \
         Linux 5.13 or later with `landlock` in the `lsm=` boot list. Turn the sandbox off for \
         this pack, or run on such a kernel"
    )]
    Unavailable { reason: &'static str },
    #[error(
        "[sandbox] network = false needs Landlock ABI 4 (Linux 6.7) to refuse TCP connections; \
         this kernel has ABI {abi}. Allow the network for this pack, or run on a newer kernel"
    )]
    NoNetworkRules { abi: u32 },
    #[error("sandbox rule for {}: {source}", path.display())]
    Path { path: PathBuf, source: io::Error },
    #[error("Landlock refused the sandbox: {0}")]
    Landlock(#[from] landlock::RulesetError),
    #[error("the kernel did not enforce the Landlock ruleset")]
    NotEnforced,
    #[error("cannot install the seccomp filter that refuses network sockets: {0}")]
    Seccomp(io::Error),
}

//! What can go wrong with conda packages, each naming what it is about.

use std::path::PathBuf;

/// A conda step that failed.
#[derive(Debug, thiserror::Error)]
pub enum CondaError {
    /// A channel as written that is neither a name, a URL nor a path.
    #[error("conda channel `{channel}` is not a channel name, URL or folder: {why}")]
    BadChannel { channel: String, why: String },

    /// A package spec that conda cannot read.
    #[error("conda dependency `{spec}` cannot be read: {why}")]
    BadSpec { spec: String, why: String },

    /// A package names a channel that is not in the channel list.
    #[error(
        "conda dependency `{package}` asks for channel `{channel}`, which is not among the \
         channels ({channels}); add it to [workspace] channels"
    )]
    UnlistedChannel {
        package: String,
        channel: String,
        channels: String,
    },

    /// A channel's index could not be read (network, missing folder, bad server answer).
    #[error(
        "conda channel {channel} ({url}) cannot be reached while looking for {packages}: \
         {cause}"
    )]
    Unreachable {
        channel: String,
        url: String,
        /// The packages that could have come from it.
        packages: String,
        cause: String,
    },

    /// The solver found no set of packages that satisfies the request.
    #[error("conda packages cannot be solved for {platform}: {message}")]
    Unsolvable { platform: String, message: String },

    /// This machine does not meet the pack's `[system-requirements]`.
    #[error("{0}")]
    System(String),

    /// Downloading or linking packages into a prefix failed.
    #[error("installing conda packages into {} failed: {cause}", prefix.display())]
    Install { prefix: PathBuf, cause: String },

    /// A lock file that is not one of ours.
    #[error("conda lock {} cannot be read: {why}", path.display())]
    BadLock { path: PathBuf, why: String },

    #[error("cannot start the conda runtime: {source}")]
    Runtime {
        #[source]
        source: std::io::Error,
    },
}

/// An error and its causes on one line.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cur = c.source();
    }
    s
}

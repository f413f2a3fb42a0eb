//! Channels as a pack writes them (`conda-forge`, a URL, a folder) and where they are.
//!
//! A name is read under the channel alias, `https://conda.anaconda.org/` unless
//! `AIRLOCK_CONDA_CHANNEL_ALIAS` says otherwise (conda's `channel_alias`: a mirror, or a local
//! folder of channels in tests). Relative folders are read against the pack's folder.

use rattler_conda_types::{Channel, ChannelConfig};
use reqwest::Url;
use std::path::Path;

use crate::error::CondaError;

/// The channel of a pack that names none (comfy-env's default too).
pub const DEFAULT_CHANNEL: &str = "conda-forge";
/// Overrides where channel names point (a URL or a folder holding one folder per channel).
pub const CHANNEL_ALIAS_ENV: &str = "AIRLOCK_CONDA_CHANNEL_ALIAS";

pub(crate) fn config(root_dir: &Path) -> Result<ChannelConfig, CondaError> {
    let mut config = ChannelConfig::default_with_root_dir(root_dir.to_path_buf());
    if let Some(alias) = std::env::var_os(CHANNEL_ALIAS_ENV).filter(|v| !v.is_empty()) {
        let alias = alias.to_string_lossy().into_owned();
        config.channel_alias = alias_url(&alias).map_err(|why| CondaError::BadChannel {
            channel: format!("{CHANNEL_ALIAS_ENV}={alias}"),
            why,
        })?;
    }
    Ok(config)
}

fn alias_url(alias: &str) -> Result<Url, String> {
    let with_slash = |s: &str| {
        if s.ends_with('/') {
            s.to_string()
        } else {
            format!("{s}/")
        }
    };
    if alias.contains("://") {
        return Url::parse(&with_slash(alias)).map_err(|e| e.to_string());
    }
    let path = Path::new(alias);
    if !path.is_absolute() {
        return Err("a folder alias must be an absolute path".into());
    }
    Url::from_directory_path(path).map_err(|()| "not a usable folder".to_string())
}

pub(crate) fn parse(channel: &str, config: &ChannelConfig) -> Result<Channel, CondaError> {
    Channel::from_str(channel, config).map_err(|e| CondaError::BadChannel {
        channel: channel.to_string(),
        why: e.to_string(),
    })
}

/// Where `channel` (as written in a pack in `root_dir`) is read from, for messages and hashes.
pub fn channel_url(channel: &str, root_dir: &Path) -> Result<String, CondaError> {
    let config = config(root_dir)?;
    Ok(parse(channel, &config)?.base_url.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_urls_and_folders() {
        let root = Path::new("/packs/p");
        let config = ChannelConfig::default_with_root_dir(root.to_path_buf());
        let url = |c: &str| parse(c, &config).unwrap().base_url.to_string();
        assert_eq!(
            url("conda-forge"),
            "https://conda.anaconda.org/conda-forge/"
        );
        assert_eq!(url("https://example.org/ch"), "https://example.org/ch/");
        assert_eq!(url("/srv/channel"), "file:///srv/channel/");
        assert!(alias_url("relative/dir").is_err());
        assert_eq!(
            alias_url("/tmp/channels").unwrap().as_str(),
            "file:///tmp/channels/"
        );
        assert_eq!(
            alias_url("https://mirror.example/conda").unwrap().as_str(),
            "https://mirror.example/conda/"
        );
    }
}

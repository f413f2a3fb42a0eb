//! A solved conda environment: every package by URL and hash, as JSON text. The text is what
//! `airlock-env` hashes into an env's key, so it is written deterministically (packages sorted
//! by name, fields in rattler's order).

use std::path::Path;

use rattler_conda_types::RepoDataRecord;
use serde::{Deserialize, Serialize};

use crate::error::CondaError;

/// The result of a solve, installable with [`crate::install`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CondaLock {
    /// The platform it was solved for, e.g. `linux-64`.
    pub platform: String,
    pub(crate) packages: Vec<RepoDataRecord>,
}

/// One package of a lock, for display.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LockedPackage {
    pub name: String,
    pub version: String,
    pub build: String,
    pub channel: Option<String>,
    pub url: String,
}

impl CondaLock {
    pub(crate) fn new(platform: &str, mut packages: Vec<RepoDataRecord>) -> CondaLock {
        packages.sort_by(|a, b| {
            a.package_record
                .name
                .as_normalized()
                .cmp(b.package_record.name.as_normalized())
        });
        CondaLock {
            platform: platform.to_string(),
            packages,
        }
    }

    /// The lock as text (what is written to disk and hashed).
    pub fn to_text(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }

    /// Reads a lock written by [`CondaLock::to_text`]; `path` is for the message.
    pub fn from_text(text: &str, path: &Path) -> Result<CondaLock, CondaError> {
        serde_json::from_str(text).map_err(|e| CondaError::BadLock {
            path: path.to_path_buf(),
            why: e.to_string(),
        })
    }

    pub fn packages(&self) -> Vec<LockedPackage> {
        self.packages
            .iter()
            .map(|r| LockedPackage {
                name: r.package_record.name.as_normalized().to_string(),
                version: r.package_record.version.to_string(),
                build: r.package_record.build.to_string(),
                channel: r.channel.clone(),
                url: r.url.to_string(),
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.packages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.packages.is_empty()
    }

    /// The version of the `python` package it installs, if any (e.g. `3.11.9`).
    pub fn python(&self) -> Option<String> {
        self.packages
            .iter()
            .find(|r| r.package_record.name.as_normalized() == "python")
            .map(|r| r.package_record.version.to_string())
    }
}

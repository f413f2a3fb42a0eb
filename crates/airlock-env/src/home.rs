//! Where environments live, and the layout under that folder.
//!
//! ```text
//! <home>/envs/<key>/                one environment, keyed by its lock (see `inputs`)
//!        <key>/airlock.lock         the lock it was synced from
//!        <key>/airlock-env.json     what it was built with
//!        <key>/.airlock-complete    written last: without it the env is half-built
//! <home>/resolutions/<inputs>/      uv's resolution of one set of inputs (lock.txt)
//! <home>/packs/<pack-id>.json       the last env of each pack (for `doctor` and `gc`)
//! <home>/logs/<pack-id>.log         uv's whole output for the pack's last build
//! <home>/pythons/<request>.json     interpreters uv found for a version request
//! <home>/locks/                     flock files serializing builds of one env or resolution
//! ```
//!
//! The home is machine-wide (not per ComfyUI install) so that two ComfyUI installs, or a pack
//! moved between them, share environments with the same lock.

use std::env;
use std::path::{Path, PathBuf};

use crate::hash::sha256_hex;

/// The variable naming where environments live (read here only).
pub const HOME_ENV: &str = "AIRLOCK_HOME";
/// Where environments live when no folder is given, in the words of the `airlock` command's
/// help.
pub const HOME_DEFAULTS: &str =
    "$AIRLOCK_HOME, else $XDG_DATA_HOME/comfy-airlock, else ~/.local/share/comfy-airlock";

/// The environment home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    root: PathBuf,
}

impl Home {
    pub fn new(root: impl Into<PathBuf>) -> Home {
        Home { root: root.into() }
    }

    /// `explicit`, else [`HOME_ENV`], else `$XDG_DATA_HOME/comfy-airlock`, else
    /// `~/.local/share/comfy-airlock` ([`HOME_DEFAULTS`]).
    pub fn resolve(explicit: Option<&Path>) -> Option<Home> {
        let var = |name: &str| {
            env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        explicit
            .map(Path::to_path_buf)
            .or_else(|| var(HOME_ENV))
            .or_else(|| var("XDG_DATA_HOME").map(|d| d.join("comfy-airlock")))
            .or_else(|| var("HOME").map(|h| h.join(".local/share/comfy-airlock")))
            .map(Home::new)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn envs(&self) -> PathBuf {
        self.root.join("envs")
    }

    pub fn env_dir(&self, key: &str) -> PathBuf {
        self.envs().join(key)
    }

    pub fn resolutions(&self) -> PathBuf {
        self.root.join("resolutions")
    }

    pub fn resolution_dir(&self, inputs_hash: &str) -> PathBuf {
        self.resolutions().join(inputs_hash)
    }

    pub fn packs(&self) -> PathBuf {
        self.root.join("packs")
    }

    pub fn pack_record(&self, pack_id: &str) -> PathBuf {
        self.packs().join(format!("{pack_id}.json"))
    }

    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }

    pub fn log(&self, pack_id: &str) -> PathBuf {
        self.logs().join(format!("{pack_id}.log"))
    }

    pub fn pythons(&self) -> PathBuf {
        self.root.join("pythons")
    }

    /// rattler's caches: channel indexes (`repodata/`) and packages (`pkgs/`), which conda
    /// envs hard-link from.
    pub fn conda_cache(&self) -> PathBuf {
        self.root.join("conda")
    }

    pub fn locks(&self) -> PathBuf {
        self.root.join("locks")
    }

    pub fn lock_file(&self, name: &str) -> PathBuf {
        self.locks().join(format!("{name}.lock"))
    }
}

/// A file-name-safe id of the pack in `dir`: its name and a hash of its folder, so two packs
/// of the same name in different folders keep apart.
pub fn pack_id(name: &str, dir: &Path) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(60)
        .collect();
    let safe = safe.trim_start_matches('.');
    let canonical = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let h = sha256_hex(canonical.as_os_str().as_encoded_bytes());
    format!("{safe}-{}", &h[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_ids_are_safe_and_distinct() {
        let a = pack_id("My Pack/../x", Path::new("/a/p"));
        assert!(a.starts_with("My_Pack_.._x-"), "{a}");
        assert!(!a.contains('/'));
        assert_ne!(
            pack_id("p", Path::new("/a/p")),
            pack_id("p", Path::new("/b/p"))
        );
        assert_eq!(
            pack_id("p", Path::new("/a/p")),
            pack_id("p", Path::new("/a/p"))
        );
        assert!(!pack_id("..", Path::new("/a")).starts_with('.'));
    }

    #[test]
    fn explicit_home_wins() {
        let h = Home::resolve(Some(Path::new("/x/home"))).unwrap();
        assert_eq!(h.env_dir("k"), Path::new("/x/home/envs/k"));
        assert_eq!(h.pack_record("p"), Path::new("/x/home/packs/p.json"));
    }
}

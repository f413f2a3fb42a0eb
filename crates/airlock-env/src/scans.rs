//! The scan cache: what a pack's worker said its nodes are, or why it could not say, keyed by
//! the content of everything that can change the answer.
//!
//! ComfyUI's host writes it (`comfy_airlock/host/scan_cache.py`): after a scan, the node
//! metadata; after a scan that failed in the pack's own code (its import raised), the failure
//! with the worker's traceback. `airlock doctor` reads it, so the log, `/airlock/workers` and
//! `doctor` report the same failure. Both compute the key here, so they cannot drift apart.
//!
//! ```text
//! <home>/scans/<key>.json   {"nodes": {...}}  or  {"failed": {"error", "type", "traceback"}}
//! ```
//!
//! The key covers the pack's Python sources and config files, the environment's key (a hash
//! of its lock), the ComfyUI tree's version, our own Python sources (the `comfy_airlock`
//! package, whose worker runtime does the import) and the wire protocol: a change to any of them
//! makes a new key, so a cached failure is retried once the pack, its env or comfy-airlock
//! changes.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::PackConfig;
use crate::home::Home;

/// Folders that hold no source the worker imports.
const SKIP_DIRS: &[&str] = &["__pycache__", "node_modules", ".git", ".venv", "venv"];

/// Files besides `.py` that change what a scan finds.
const CONFIG_FILES: &[&str] = &["airlock.toml", "comfy-env.toml"];

/// A scan that failed in the pack's code, as cached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanFailure {
    /// The exception's message as the host shows it.
    pub error: String,
    /// The exception's type name (`ImportError`, `ModuleNotFoundError`, ...).
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// The worker's traceback (with the pack's files and lines).
    #[serde(default)]
    pub traceback: Option<String>,
}

/// What the scan cache holds for one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CachedScan {
    /// Nothing: the pack was not scanned with this content (its nodes are read at ComfyUI's
    /// next start).
    Absent,
    /// Its nodes were read; for a group, the members whose import failed (ADR 0054).
    Nodes {
        failed_members: Vec<(String, ScanFailure)>,
    },
    /// Its import failed.
    Failed(ScanFailure),
}

/// The cache key of a pack's scan (32 hex digits).
pub fn scan_key(
    pack_dir: &Path,
    env_key: &str,
    comfyui_dir: Option<&Path>,
    runtime_dir: Option<&Path>,
    protocol: u32,
) -> io::Result<String> {
    let mut h = Sha256::new();
    h.update(format!("protocol={protocol}\0env={env_key}\0").as_bytes());
    if let Some(dir) = comfyui_dir {
        let version = dir.join("comfyui_version.py");
        match fs::read(&version) {
            Ok(bytes) => h.update(&bytes),
            Err(_) => h.update(dir.as_os_str().as_encoded_bytes()),
        }
    }
    if let Some(runtime) = runtime_dir {
        h.update(b"runtime\0");
        hash_tree(&mut h, runtime)?;
        h.update(b"pack\0");
    }
    hash_tree(&mut h, pack_dir)?;
    // A group's member may be a link to a pack kept elsewhere (ADR 0054), which the walk does
    // not follow: its files count all the same.
    let members = PackConfig::load(pack_dir).map(|c| c.members);
    for m in members.unwrap_or_default() {
        let dir = pack_dir.join(&m);
        if dir.is_symlink() {
            h.update(format!("member={m}\0").as_bytes());
            hash_tree(&mut h, &dir)?;
        }
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok(hex[..32].to_string())
}

/// Each source and config file under `root`: its relative path and the hash of its content.
fn hash_tree(h: &mut Sha256, root: &Path) -> io::Result<()> {
    let mut files = Vec::new();
    collect(root, Path::new(""), &mut files)?;
    files.sort();
    for rel in files {
        h.update(rel.as_bytes());
        h.update(b"\0");
        h.update(Sha256::digest(fs::read(root.join(&rel))?));
    }
    Ok(())
}

/// The relative paths (`/`-separated) of the files that go into the key. Symlinked folders are
/// not followed (as `os.walk` does not); symlinked files are read.
fn collect(root: &Path, rel: &Path, out: &mut Vec<String>) -> io::Result<()> {
    for entry in fs::read_dir(root.join(rel))? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let path = entry.path();
        let ft = entry.file_type()?;
        let is_dir = ft.is_dir() || (ft.is_symlink() && path.is_dir());
        if is_dir {
            if ft.is_dir() && !name.starts_with('.') && !SKIP_DIRS.contains(&name.as_ref()) {
                collect(root, &rel.join(name.as_ref()), out)?;
            }
        } else if name.ends_with(".py") || CONFIG_FILES.contains(&name.as_ref()) {
            out.push(rel.join(name.as_ref()).to_string_lossy().into_owned());
        }
    }
    Ok(())
}

/// Where the scan of `key` is cached.
pub fn scan_path(home: &Home, key: &str) -> PathBuf {
    home.root().join("scans").join(format!("{key}.json"))
}

/// What the cache holds for `key`. An unreadable entry counts as absent (the host scans again
/// and rewrites it).
pub fn cached_scan(home: &Home, key: &str) -> CachedScan {
    let Ok(text) = fs::read_to_string(scan_path(home, key)) else {
        return CachedScan::Absent;
    };
    parse_cached(&text)
}

fn parse_cached(text: &str) -> CachedScan {
    #[derive(Deserialize)]
    struct Member {
        failed: Option<ScanFailure>,
    }
    #[derive(Deserialize)]
    struct Entry {
        failed: Option<ScanFailure>,
        nodes: Option<serde_json::Value>,
        #[serde(default)]
        members: std::collections::BTreeMap<String, Member>,
    }
    match serde_json::from_str::<Entry>(text) {
        Ok(Entry {
            failed: Some(f), ..
        }) => CachedScan::Failed(f),
        Ok(Entry {
            nodes: Some(_),
            members,
            ..
        }) => CachedScan::Nodes {
            failed_members: members
                .into_iter()
                .filter_map(|(name, m)| m.failed.map(|f| (name, f)))
                .collect(),
        },
        _ => CachedScan::Absent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pack() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("__init__.py"), "import x\n").unwrap();
        fs::write(d.path().join("airlock.toml"), "").unwrap();
        d
    }

    #[test]
    fn the_key_follows_sources_config_env_and_protocol_only() {
        let d = pack();
        let p = d.path();
        let k = |env: &str, proto: u32| scan_key(p, env, None, None, proto).unwrap();
        let base = k("e1", 3);
        assert_eq!(base.len(), 32);
        assert_eq!(base, k("e1", 3), "stable");
        assert_ne!(base, k("e2", 3), "env");
        assert_ne!(base, k("e1", 4), "protocol");

        // Files that are neither source nor config, and caches, do not count.
        fs::write(p.join("README.md"), "x").unwrap();
        fs::create_dir_all(p.join("__pycache__")).unwrap();
        fs::write(p.join("__pycache__/a.py"), "x").unwrap();
        fs::create_dir_all(p.join(".git")).unwrap();
        fs::write(p.join(".git/b.py"), "x").unwrap();
        assert_eq!(base, k("e1", 3));

        // A source in a subfolder, or an edit, does.
        fs::create_dir_all(p.join("nodes")).unwrap();
        fs::write(p.join("nodes/n.py"), "").unwrap();
        let with_sub = k("e1", 3);
        assert_ne!(base, with_sub);
        fs::write(p.join("nodes/n.py"), "y = 1\n").unwrap();
        assert_ne!(with_sub, k("e1", 3));
        fs::write(p.join("airlock.toml"), "python = \"3.10\"\n").unwrap();
        fs::remove_dir_all(p.join("nodes")).unwrap();
        assert_ne!(base, k("e1", 3), "config");
    }

    #[test]
    fn the_comfyui_version_counts() {
        let d = pack();
        let ui = tempfile::tempdir().unwrap();
        let ver = ui.path().join("comfyui_version.py");
        fs::write(&ver, "__version__ = \"0.30.0\"\n").unwrap();
        let a = scan_key(d.path(), "e", Some(ui.path()), None, 3).unwrap();
        fs::write(&ver, "__version__ = \"0.31.0\"\n").unwrap();
        let b = scan_key(d.path(), "e", Some(ui.path()), None, 3).unwrap();
        assert_ne!(a, b);
        assert_ne!(a, scan_key(d.path(), "e", None, None, 3).unwrap());
        // Our own runtime's sources count too: an upgrade retries cached failures.
        let rt = tempfile::tempdir().unwrap();
        fs::write(rt.path().join("comfy.py"), "a = 1\n").unwrap();
        let with_rt = |d2: &Path| scan_key(d.path(), "e", None, Some(d2), 3).unwrap();
        let r1 = with_rt(rt.path());
        assert_ne!(r1, scan_key(d.path(), "e", None, None, 3).unwrap());
        fs::write(rt.path().join("comfy.py"), "a = 2\n").unwrap();
        assert_ne!(r1, with_rt(rt.path()));
    }

    #[test]
    #[cfg(unix)]
    fn a_groups_linked_member_counts() {
        let d = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let member = elsewhere.path().join("Impact");
        fs::create_dir_all(&member).unwrap();
        fs::write(member.join("__init__.py"), "").unwrap();
        std::os::unix::fs::symlink(&member, d.path().join("Impact")).unwrap();
        fs::write(d.path().join("airlock.toml"), "packs = [\"Impact\"]\n").unwrap();
        let k = || scan_key(d.path(), "e", None, None, 3).unwrap();
        let before = k();
        fs::write(member.join("__init__.py"), "X = 1\n").unwrap();
        assert_ne!(before, k(), "an edit in the linked member");
    }

    #[test]
    fn cached_entries_are_told_apart() {
        let nodes = CachedScan::Nodes {
            failed_members: Vec::new(),
        };
        assert_eq!(parse_cached("{\"nodes\": {}}"), nodes);
        let group = "{\"nodes\": {}, \"members\": {\"a\": {\"web_directory\": null, \
                     \"failed\": null}, \"b\": {\"failed\": {\"error\": \"boom\"}}}}";
        match parse_cached(group) {
            CachedScan::Nodes { failed_members } => {
                assert_eq!(failed_members.len(), 1);
                assert_eq!(
                    (
                        failed_members[0].0.as_str(),
                        failed_members[0].1.error.as_str()
                    ),
                    ("b", "boom")
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(parse_cached("not json"), CachedScan::Absent);
        assert_eq!(parse_cached("{}"), CachedScan::Absent);
        let f = parse_cached(
            "{\"failed\": {\"error\": \"boom\", \"type\": \"ImportError\", \
             \"traceback\": \"Traceback ...\\n  File \\\"x.py\\\", line 3\"}}",
        );
        match f {
            CachedScan::Failed(f) => {
                assert_eq!(f.error, "boom");
                assert_eq!(f.kind.as_deref(), Some("ImportError"));
                assert!(f.traceback.unwrap().contains("line 3"));
            }
            other => panic!("{other:?}"),
        }
        let home = tempfile::tempdir().unwrap();
        let home = Home::new(home.path());
        assert_eq!(cached_scan(&home, "k"), CachedScan::Absent);
        fs::create_dir_all(home.root().join("scans")).unwrap();
        fs::write(scan_path(&home, "k"), "{\"failed\": {\"error\": \"e\"}}").unwrap();
        assert!(matches!(cached_scan(&home, "k"), CachedScan::Failed(_)));
    }
}

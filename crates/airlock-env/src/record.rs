//! The JSON records kept under the home: one per env (what it was built from) and one per pack
//! (which env it uses now). Written through a temporary file and a rename, so a reader never
//! sees half a record, even when two ComfyUI processes start at once.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::interpreter::Interpreter;

/// `<home>/packs/<pack-id>.json`: the env a pack uses, and what it was computed from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackRecord {
    pub name: String,
    pub pack_dir: PathBuf,
    /// The inputs hash the env was resolved from; the pack is current while it still matches.
    pub inputs_hash: String,
    pub env_key: String,
    pub env_dir: PathBuf,
    /// The env's interpreter.
    pub python: PathBuf,
    /// The interpreter the env was created from.
    pub interpreter: Interpreter,
    /// What the inputs were computed with, so `gc` can recompute them the same way.
    pub comfyui_dir: Option<PathBuf>,
    pub host_python: Option<PathBuf>,
    pub comfy: bool,
    /// The comfy-env config the env was built from (a pack may have one env per file).
    #[serde(default)]
    pub config_file: Option<PathBuf>,
    /// Seconds since the epoch.
    pub updated: u64,
}

/// `<home>/envs/<key>/airlock-env.json`: what an env was built from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvRecord {
    pub key: String,
    pub interpreter: Interpreter,
    pub inputs_hash: String,
    pub packages: usize,
    pub uv_version: Option<String>,
    pub built_for: String,
    pub created: u64,
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Reads a JSON record; `None` when it is missing or unreadable (then it is rebuilt).
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Option<T> {
    let bytes = fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Writes a JSON record atomically.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let mut text = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    text.push(b'\n');
    write_atomic(path, &text)
}

/// Writes `bytes` to a temporary file beside `to` and renames it over `to`.
pub fn write_atomic(to: &Path, bytes: &[u8]) -> io::Result<()> {
    if let Some(dir) = to.parent() {
        fs::create_dir_all(dir)?;
    }
    // Unique per process and call: threads of one process may write the same record.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut tmp = to.as_os_str().to_owned();
    tmp.push(format!(".tmp{}-{n}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trip_and_missing_files() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a/b.json");
        assert_eq!(read_json::<Vec<u32>>(&p), None);
        write_json(&p, &vec![1u32, 2]).unwrap();
        assert_eq!(read_json::<Vec<u32>>(&p), Some(vec![1, 2]));
        fs::write(&p, "{broken").unwrap();
        assert_eq!(read_json::<Vec<u32>>(&p), None);
        assert_eq!(fs::read_dir(d.path().join("a")).unwrap().count(), 1);
    }
}

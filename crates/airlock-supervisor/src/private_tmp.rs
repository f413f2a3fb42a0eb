//! Each worker's own temporary directory, its `TMPDIR` and `XDG_RUNTIME_DIR`.
//!
//! A pack's temp files (`tempfile`, torch's, its libraries') then never mix with the host's or
//! other packs' in the shared `/tmp`, are not open to other users (the directory is 0700), and
//! do not outlive the worker: the reaper removes the directory once the process has been
//! reaped (before it publishes the exit, so whoever sees a worker stopped finds its temp files
//! gone). A host killed before its reapers ran leaves directories behind; the next spawn from
//! any host removes those whose host process no longer exists.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rustix::fs::Mode;

use crate::spawn::hex;

const PREFIX: &str = "airlock-tmp-";

/// A 0700 directory under the host's temp dir, removed (with its contents) on drop.
#[derive(Debug)]
pub(crate) struct PrivateTmp {
    pub path: PathBuf,
}

impl PrivateTmp {
    pub fn create() -> io::Result<PrivateTmp> {
        Self::create_in(&base())
    }

    pub fn create_in(base: &Path) -> io::Result<PrivateTmp> {
        sweep_stale(base);
        let mut rnd = [0u8; 8];
        rustix::rand::getrandom(&mut rnd, rustix::rand::GetRandomFlags::empty())?;
        let path = base.join(format!("{PREFIX}{}-{}", std::process::id(), hex(&rnd)));
        rustix::fs::mkdir(&path, Mode::RWXU)?;
        Ok(PrivateTmp { path })
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        remove_tree(&self.path);
    }
}

/// The host's temp dir (`TMPDIR`, else `/tmp`).
fn base() -> PathBuf {
    let t = std::env::temp_dir();
    if t.is_dir() { t } else { PathBuf::from("/tmp") }
}

/// Removes a tree even where the worker took away our write permission on a subdirectory.
fn remove_tree(path: &Path) {
    if fs::remove_dir_all(path).is_ok() || !path.exists() {
        return;
    }
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let _ = fs::set_permissions(&dir, fs::Permissions::from_mode(0o700));
        if let Ok(entries) = fs::read_dir(&dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
    }
    let _ = fs::remove_dir_all(path);
}

/// Removes the directories of hosts that are gone (`airlock-tmp-<pid>-…` with no such pid).
fn sweep_stale(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let ours = e.metadata().is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            m.is_dir() && m.uid() == rustix::process::getuid().as_raw()
        });
        if ours && pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            remove_tree(&e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch base dir of the test's own (a `PrivateTmp`, so it is removed too).
    fn scratch() -> PrivateTmp {
        PrivateTmp::create_in(&base()).unwrap()
    }

    #[test]
    fn private_removed_even_when_locked_and_stale_ones_swept() {
        let holder = scratch();
        let base = &holder.path;
        let t = PrivateTmp::create_in(base).unwrap();
        let mode = fs::metadata(&t.path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let locked = t.path.join("a/b");
        fs::create_dir_all(&locked).unwrap();
        fs::write(locked.join("f"), "x").unwrap();
        fs::set_permissions(t.path.join("a"), fs::Permissions::from_mode(0o500)).unwrap();
        let path = t.path.clone();
        drop(t);
        assert!(!path.exists());

        // A directory left by a host that no longer runs (pid beyond pid_max), one of a live
        // process (ours) and an unrelated one.
        let stale = base.join(format!("{PREFIX}4294967295-00"));
        let live = base.join(format!("{PREFIX}{}-ff", std::process::id()));
        let other = base.join("airlock-1-00");
        for d in [&stale, &live, &other] {
            fs::create_dir(d).unwrap();
            fs::write(d.join("f"), "x").unwrap();
        }
        let t = PrivateTmp::create_in(base).unwrap();
        assert!(!stale.exists());
        assert!(live.exists() && other.exists());
        drop(t);
    }
}

//! Advisory file locks that serialize builds of one env (or one resolution) across processes.
//!
//! Two ComfyUI instances starting together, or `airlock build` run while ComfyUI starts, would
//! otherwise create the same venv at the same time. `flock` locks die with their process, so a
//! crashed build never leaves a lock behind (its half-built env is removed by the next one).
//! Lock files are never deleted: deleting one while a process waits on it would let a third
//! process lock a new file and build beside the waiter.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::Path;

use rustix::fs::{FlockOperation, flock};

/// An exclusive lock, held until dropped.
#[derive(Debug)]
pub struct FileLock {
    _file: File,
}

impl FileLock {
    fn open(path: &Path) -> io::Result<File> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
    }

    /// Waits for the lock.
    pub fn exclusive(path: &Path) -> io::Result<FileLock> {
        let file = Self::open(path)?;
        flock(&file, FlockOperation::LockExclusive)?;
        Ok(FileLock { _file: file })
    }

    /// Takes the lock if nobody holds it.
    pub fn try_exclusive(path: &Path) -> io::Result<Option<FileLock>> {
        let file = Self::open(path)?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(FileLock { _file: file })),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_waits_for_the_first() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("locks/x.lock");
        let a = FileLock::try_exclusive(&p).unwrap().expect("free");
        assert!(FileLock::try_exclusive(&p).unwrap().is_none());
        drop(a);
        let _b = FileLock::exclusive(&p).unwrap();
    }
}

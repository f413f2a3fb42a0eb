//! One memfd-backed shared-memory segment.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{FallocateFlags, MemfdFlags, SealFlags};

use crate::error::ShmError;
use crate::mapping::Mapping;

/// A memfd of fixed size: never a name in `/dev/shm`, gone when the last fd and mapping close.
#[derive(Debug)]
pub struct Segment {
    fd: OwnedFd,
    len: u64,
    /// Our own read-write mapping, for segments we created (we copy into them).
    map: Option<Mapping>,
}

impl Segment {
    /// Creates a segment of `len` bytes with its pages allocated up front, sealed against
    /// resizing so a peer cannot shrink it under our mapping (SIGBUS).
    pub fn create(name: &str, len: u64) -> Result<Segment, ShmError> {
        let err = |source: rustix::io::Errno| ShmError::Create {
            len,
            source: source.into(),
        };
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
            .map_err(err)?;
        rustix::fs::ftruncate(&fd, len).map_err(err)?;
        if len > 0 {
            rustix::fs::fallocate(&fd, FallocateFlags::empty(), 0, len).map_err(err)?;
        }
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
            .map_err(err)?;
        let map = if len > 0 {
            Some(
                Mapping::new(fd.as_fd(), len as usize)
                    .map_err(|source| ShmError::Create { len, source })?,
            )
        } else {
            None
        };
        Ok(Segment { fd, len, map })
    }

    /// Adopts a segment fd received from the peer, checking that it really is `len` bytes and
    /// cannot shrink.
    pub fn adopt(fd: OwnedFd, len: u64) -> Result<Segment, ShmError> {
        let actual = rustix::fs::fstat(&fd)
            .map_err(std::io::Error::from)?
            .st_size as u64;
        if actual < len {
            return Err(ShmError::SizeMismatch {
                announced: len,
                actual,
            });
        }
        let seals = rustix::fs::fcntl_get_seals(&fd).map_err(std::io::Error::from)?;
        if !seals.contains(SealFlags::SHRINK) {
            return Err(ShmError::Io(std::io::Error::other(
                "segment fd is not sealed against shrinking",
            )));
        }
        Ok(Segment { fd, len, map: None })
    }

    /// Start of our mapping (segments we created only).
    pub(crate) fn base(&self) -> Option<*mut u8> {
        self.map.as_ref().map(Mapping::ptr)
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_segment_is_sized_sealed_and_adoptable() {
        let seg = Segment::create("airlock-test", 1 << 20).unwrap();
        assert_eq!(seg.len(), 1 << 20);
        let dup = seg.fd().try_clone_to_owned().unwrap();
        assert!(
            rustix::fs::ftruncate(&dup, 10).is_err(),
            "shrink must be sealed"
        );
        let adopted = Segment::adopt(dup, 1 << 20).unwrap();
        assert_eq!(adopted.len(), 1 << 20);
    }

    #[test]
    fn adopting_a_short_fd_fails() {
        let seg = Segment::create("airlock-test", 4096).unwrap();
        let dup = seg.fd().try_clone_to_owned().unwrap();
        assert!(matches!(
            Segment::adopt(dup, 8192),
            Err(ShmError::SizeMismatch { .. })
        ));
    }
}

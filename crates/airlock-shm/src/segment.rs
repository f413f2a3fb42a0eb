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
    /// Sealed against writes through other mappings (see [`Segment::create_sealed`]).
    frozen: bool,
}

impl Segment {
    /// Creates a segment of `len` bytes with its pages allocated up front, sealed against
    /// resizing so a peer cannot shrink it under our mapping (SIGBUS).
    pub fn create(name: &str, len: u64) -> Result<Segment, ShmError> {
        Segment::create_sealed(name, len, false)
    }

    /// [`Segment::create`]; a `frozen` segment is also sealed against writes through any
    /// mapping or descriptor but the one we make here (`F_SEAL_FUTURE_WRITE`): the peer, and
    /// our own Python views, can only map it privately, so its bytes change only by our pool's
    /// copies into free regions (kept copies of sent tensors, ADR 0027).
    pub fn create_sealed(name: &str, len: u64, frozen: bool) -> Result<Segment, ShmError> {
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
        // Mapped before the seals: a future-write seal refuses new shared writable mappings.
        let map = if len > 0 {
            Some(
                Mapping::new(fd.as_fd(), len as usize)
                    .map_err(|source| ShmError::Create { len, source })?,
            )
        } else {
            None
        };
        let mut seals = SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL;
        if frozen {
            seals |= SealFlags::FUTURE_WRITE;
        }
        rustix::fs::fcntl_add_seals(&fd, seals).map_err(err)?;
        Ok(Segment {
            fd,
            len,
            map,
            frozen,
        })
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
        let frozen = seals.contains(SealFlags::FUTURE_WRITE);
        Ok(Segment {
            fd,
            len,
            map: None,
            frozen,
        })
    }

    /// Start of our mapping (segments we created only).
    pub(crate) fn base(&self) -> Option<*mut u8> {
        self.map.as_ref().map(Mapping::ptr)
    }

    /// Frees the segment's memory now, for every process that maps it (reads then see zeros).
    /// For a segment being retired with no region leased: the peer learns of the retirement
    /// only with our next frame, and until then its mapping would keep the pages alive.
    pub fn punch(&self) {
        if self.len > 0 {
            let mode = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
            let _ = rustix::fs::fallocate(&self.fd, mode, 0, self.len);
        }
    }

    /// Drops our mapping's page-table entries (see [`Mapping::drop_pages`]).
    pub(crate) fn drop_pages(&self) {
        if let Some(m) = &self.map {
            m.drop_pages();
        }
    }

    /// Fills our mapping's page-table entries again (see [`Mapping::populate`]).
    pub(crate) fn populate(&self) {
        if let Some(m) = &self.map {
            m.populate();
        }
    }

    /// Whether only its creator's first mapping can write it.
    pub fn is_frozen(&self) -> bool {
        self.frozen
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

/// Copies `dst.len()` bytes at `offset` of a segment of `len` bytes into `dst` with `pread`:
/// no mapping, so a hole of a sparse segment reads as zeros without committing a page.
pub fn read_at(fd: BorrowedFd<'_>, len: u64, offset: u64, dst: &mut [u8]) -> Result<(), ShmError> {
    let end = offset.checked_add(dst.len() as u64);
    if end.is_none_or(|e| e > len) {
        return Err(ShmError::OutOfSegment {
            offset,
            len: dst.len() as u64,
            segment_len: len,
        });
    }
    let mut done = 0;
    while done < dst.len() {
        let n = match rustix::io::pread(fd, &mut dst[done..], offset + done as u64) {
            Err(rustix::io::Errno::INTR) => continue,
            r => r.map_err(std::io::Error::from)?,
        };
        if n == 0 {
            return Err(ShmError::SizeMismatch {
                announced: len,
                actual: offset + done as u64,
            });
        }
        done += n;
    }
    Ok(())
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
    fn read_at_reads_inside_the_segment_only() {
        let seg = Segment::create("airlock-test", 8192).unwrap();
        let mut buf = [7u8; 16];
        read_at(seg.fd(), seg.len(), 8192 - 16, &mut buf).unwrap();
        assert_eq!(buf, [0u8; 16]);
        assert!(matches!(
            read_at(seg.fd(), seg.len(), 8192 - 15, &mut buf),
            Err(ShmError::OutOfSegment { .. })
        ));
        assert!(read_at(seg.fd(), seg.len(), u64::MAX, &mut buf).is_err());
    }

    #[test]
    fn a_frozen_segment_is_written_only_through_its_first_mapping() {
        let seg = Segment::create_sealed("airlock-test", 1 << 20, true).unwrap();
        assert!(seg.is_frozen());
        unsafe { *seg.base().unwrap() = 7 };
        let shared_rw = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                1 << 20,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                seg.fd(),
                0,
            )
        };
        assert!(
            shared_rw.is_err(),
            "a second writable shared mapping is refused"
        );
        assert!(rustix::io::pwrite(seg.fd(), b"x", 0).is_err());
        let dup = seg.fd().try_clone_to_owned().unwrap();
        assert!(Segment::adopt(dup, 1 << 20).unwrap().is_frozen());
        let plain = Segment::create("airlock-test", 4096).unwrap();
        assert!(!plain.is_frozen());
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

//! Our own read-write mapping of a segment, and the copy into it.

use std::os::fd::BorrowedFd;

use rustix::mm::{MapFlags, ProtFlags};

/// A shared read-write mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; who writes where is governed by leases.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps all of `fd` with its page tables filled (MAP_POPULATE), so copies into it do not
    /// fault page by page.
    pub fn new(fd: BorrowedFd<'_>, len: usize) -> std::io::Result<Mapping> {
        // SAFETY: a fresh mapping of a memfd we created and sealed against shrinking.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED | MapFlags::POPULATE,
                fd,
                0,
            )?
        };
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
        })
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Drops our page-table entries (the pages stay in the segment, for the peer's views):
    /// they leave our resident set, and the next write faults them back in.
    pub fn drop_pages(&self) {
        // SAFETY: our own mapping; a shared mapping keeps its data.
        unsafe {
            let _ =
                rustix::mm::madvise(self.ptr.cast(), self.len, rustix::mm::Advice::LinuxDontNeed);
        }
    }

    /// Fills our page-table entries again at once (rather than one fault per page). On a
    /// kernel before 5.14 the copies fault them in instead.
    pub fn populate(&self) {
        // SAFETY: our own mapping of pages allocated up front: nothing is allocated or changed.
        unsafe {
            let _ = rustix::mm::madvise(
                self.ptr.cast(),
                self.len,
                rustix::mm::Advice::LinuxPopulateWrite,
            );
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped.
        unsafe {
            let _ = rustix::mm::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// Below this, one thread copies: spawning helpers costs more than it saves.
const PARALLEL_MIN: usize = 32 << 20;

/// The cores this process may run on, read once.
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |p| p.get()))
}

/// Copies `n` bytes from `src` to `dst`, on up to four threads for large copies.
///
/// # Safety
/// `src` must be readable and `dst` writable for `n` bytes, and the ranges must not overlap
/// or be written by anyone else during the copy.
pub unsafe fn copy_nonoverlapping(src: *const u8, dst: *mut u8, n: usize) {
    // Small copies never ask how many cores there are: `available_parallelism` reads the
    // cgroup's files on every call (tens of microseconds, on every tensor crossing).
    let threads = if n < 2 * PARALLEL_MIN {
        1
    } else {
        cores().min(4).min(n / PARALLEL_MIN).max(1)
    };
    if threads == 1 {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
        return;
    }
    let chunk = n.div_ceil(threads).next_multiple_of(4096);
    let (src, dst) = (src as usize, dst as usize);
    std::thread::scope(|s| {
        for start in (0..n).step_by(chunk) {
            let len = chunk.min(n - start);
            s.spawn(move || {
                // SAFETY: disjoint sub-ranges of the caller's ranges.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        (src + start) as *const u8,
                        (dst + start) as *mut u8,
                        len,
                    )
                };
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_copy_copies_every_byte() {
        let n = (PARALLEL_MIN * 3) + 12345;
        let src: Vec<u8> = (0..n).map(|i| (i * 31 % 251) as u8).collect();
        let mut dst = vec![0u8; n];
        unsafe { copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), n) };
        assert!(src == dst);
    }
}

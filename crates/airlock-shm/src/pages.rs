//! What the kernel knows about our own pages: which of a range were written since we last
//! looked (userfaultfd write-protection in async mode, read back with `PAGEMAP_SCAN`), and
//! which pages of a private file mapping are our own copies (written through it).
//!
//! Both need Linux 6.7 (`UFFD_FEATURE_WP_ASYNC`, `PAGEMAP_SCAN`). Where they are missing (an
//! older kernel, a seccomp filter refusing `userfaultfd`, no `/proc`), every question answers
//! "cannot tell", and callers copy as before. ADR 0027 records why this, and not the tensor's
//! version counter or a checksum, decides whether a kept copy is still the tensor's bytes.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

const PAGE: usize = 4096;

// <linux/userfaultfd.h>
const UFFD_API: u64 = 0xAA;
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;
const UFFDIO_API: libc::c_ulong = iowr(0xAA, 0x3F, 24);
const UFFDIO_REGISTER: libc::c_ulong = iowr(0xAA, 0x00, 32);
const UFFDIO_UNREGISTER: libc::c_ulong = ior(0xAA, 0x01, 16);
const UFFDIO_WRITEPROTECT: libc::c_ulong = iowr(0xAA, 0x06, 24);

// <linux/fs.h>, PAGEMAP_SCAN
const PAGE_IS_WRITTEN: u64 = 1 << 1;
const PAGE_IS_FILE: u64 = 1 << 2;
const PAGE_IS_PRESENT: u64 = 1 << 3;
const PAGE_IS_SWAPPED: u64 = 1 << 4;
const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;
const PAGEMAP_SCAN: libc::c_ulong = iowr(b'f' as u64, 16, std::mem::size_of::<ScanArg>() as u64);

const fn ioc(dir: u64, ty: u64, nr: u64, size: u64) -> libc::c_ulong {
    ((dir << 30) | (size << 16) | (ty << 8) | nr) as libc::c_ulong
}
const fn iowr(ty: u64, nr: u64, size: u64) -> libc::c_ulong {
    ioc(3, ty, nr, size)
}
const fn ior(ty: u64, nr: u64, size: u64) -> libc::c_ulong {
    ioc(2, ty, nr, size)
}

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

#[repr(C)]
#[derive(Default)]
struct ScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// The process's userfaultfd and `/proc/self/pagemap`, opened on first use by the process that
/// uses them: after a `fork` the child opens its own (the parent's would describe the parent).
struct Kernel {
    pid: u32,
    uffd: Option<OwnedFd>,
    pagemap: Option<File>,
    /// `PAGEMAP_SCAN` asked only for written pages takes the kernel's fast path, which reads
    /// each entry's write-protection alone (over 30x faster: 15 µs against 491 µs for
    /// 64 MiB here, ADR 0036); trusted from the kernel that reads it right for entries that
    /// are not present ([`written_scan_is_exact`]).
    fast_written: bool,
}

static KERNEL: Mutex<Option<Kernel>> = Mutex::new(None);

fn open_uffd() -> Option<OwnedFd> {
    let flags = libc::O_CLOEXEC | libc::O_NONBLOCK | UFFD_USER_MODE_ONLY;
    // SAFETY: a plain syscall; a non-negative result is a new descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
    if fd < 0 {
        return None;
    }
    // SAFETY: just created, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
    let mut api = UffdioApi {
        api: UFFD_API,
        features: UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_API with its own struct.
    let ok = unsafe { libc::ioctl(fd.as_raw_fd(), UFFDIO_API, &mut api) } == 0;
    let wanted = UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED;
    (ok && api.features & wanted == wanted).then_some(fd)
}

/// Whether a kernel of this release (`uname -r`) answers a written-only `PAGEMAP_SCAN` exactly.
///
/// Asked for `PAGE_IS_WRITTEN` alone, the kernel skips computing each page's categories and
/// reports a page unless its entry is write-protected: present and protected, or swapped out
/// (or a marker) and protected. A page dropped since (`MADV_DONTNEED` on anonymous memory
/// leaves an empty entry) is reported, as a write is; a page swapped out unwritten is not,
/// and it comes back with the same bytes. Before Linux 6.10 ("fs/proc/task_mmu: fix uffd-wp
/// confusion in pagemap_scan_pmd_entry", April 2024) that path read the protection bit of a
/// swapped-out entry at the wrong place and could miss a write; there the full walk is used.
fn written_scan_is_exact(release: &str) -> bool {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next().and_then(|p| p.parse::<u32>().ok());
    let minor = parts.next().and_then(|p| p.parse::<u32>().ok());
    matches!((major, minor), (Some(a), Some(b)) if (a, b) >= (6, 10))
}

fn kernel_release() -> String {
    // SAFETY: uname fills the struct it is given.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return String::new();
    }
    // SAFETY: uname NUL-terminates each field.
    unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// Runs `f` with this process's descriptors (opened if need be).
fn with_kernel<T>(f: impl FnOnce(&Kernel) -> T) -> T {
    let mut k = KERNEL.lock().unwrap_or_else(|p| p.into_inner());
    let pid = crate::pid::current_pid();
    if k.as_ref().is_none_or(|k| k.pid != pid) {
        *k = Some(Kernel {
            pid,
            uffd: open_uffd(),
            pagemap: File::open("/proc/self/pagemap").ok(),
            fast_written: written_scan_is_exact(&kernel_release()),
        });
    }
    f(k.as_ref().expect("just set"))
}

fn page_span(addr: usize, len: usize) -> (usize, usize) {
    let lo = addr & !(PAGE - 1);
    let hi = (addr + len).next_multiple_of(PAGE);
    (lo, hi)
}

/// What a scan reports of each region found: every category the walks here look at.
const ALL_CATEGORIES: u64 = PAGE_IS_WRITTEN | PAGE_IS_FILE | PAGE_IS_PRESENT | PAGE_IS_SWAPPED;

/// Which pages a scan reports (the kernel's category masks) and what it says of them.
#[derive(Clone, Copy, Default)]
struct Query {
    flags: u64,
    inverted: u64,
    mask: u64,
    anyof: u64,
    ret: u64,
}

/// A watched range's written pages, the kernel's fast path (see [`written_scan_is_exact`]).
const WRITTEN_ONLY: Query = Query {
    flags: PM_SCAN_CHECK_WPASYNC,
    inverted: 0,
    mask: PAGE_IS_WRITTEN,
    anyof: 0,
    ret: PAGE_IS_WRITTEN,
};

/// A watched range's pages written, not present, or not ours alone: the full walk.
const WRITTEN_OR_GONE: Query = Query {
    flags: PM_SCAN_CHECK_WPASYNC,
    inverted: PAGE_IS_PRESENT,
    mask: 0,
    anyof: PAGE_IS_WRITTEN | PAGE_IS_PRESENT | PAGE_IS_FILE,
    ret: ALL_CATEGORIES,
};

/// One `PAGEMAP_SCAN` of `[lo, hi)` into `vec`: the regions found, and where the walk ended.
fn scan(
    pagemap: &File,
    (lo, hi): (usize, usize),
    q: Query,
    vec: &mut [PageRegion],
) -> std::io::Result<(usize, u64)> {
    let mut arg = ScanArg {
        size: std::mem::size_of::<ScanArg>() as u64,
        flags: q.flags,
        start: lo as u64,
        end: hi as u64,
        vec: vec.as_mut_ptr() as u64,
        vec_len: vec.len() as u64,
        category_inverted: q.inverted,
        category_mask: q.mask,
        category_anyof_mask: q.anyof,
        return_mask: q.ret,
        ..ScanArg::default()
    };
    // SAFETY: PAGEMAP_SCAN writes at most `vec_len` regions into `vec`.
    let n = unsafe { libc::ioctl(pagemap.as_raw_fd(), PAGEMAP_SCAN, &mut arg) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((n as usize, arg.walk_end))
}

/// Watches a range of our own private anonymous memory (a tensor's bytes) for writes, from
/// any thread and by any route: torch, numpy, a raw pointer, the kernel (`read` into it).
///
/// The whole pages inside the range are write-protected in the kernel's async mode: a write
/// clears the protection of its page without a signal or a handler thread, and
/// [`WriteWatch::unchanged`] reads the protection back. The partial pages at either end are
/// shared with whatever lies next to the range (an allocator writes its own bookkeeping
/// there), so they are compared instead, against a snapshot taken when the watch is armed.
#[derive(Debug)]
pub struct WriteWatch {
    /// The whole pages inside the range (empty when it has none).
    lo: usize,
    hi: usize,
    /// The bytes before `lo` and from `hi` on, as they were when the watch was armed.
    head: Edge,
    tail: Edge,
}

#[derive(Debug)]
struct Edge {
    addr: usize,
    bytes: Vec<u8>,
}

impl Edge {
    fn new(addr: usize, len: usize) -> Edge {
        Edge {
            addr,
            bytes: vec![0; len],
        }
    }

    /// # Safety
    /// The edge's bytes must be readable.
    unsafe fn snapshot(&mut self) {
        let src = self.addr as *const u8;
        // SAFETY: the caller's contract; our buffer is exactly as long.
        unsafe { std::ptr::copy_nonoverlapping(src, self.bytes.as_mut_ptr(), self.bytes.len()) };
    }

    /// # Safety
    /// The edge's bytes must be readable.
    unsafe fn same(&self) -> bool {
        // SAFETY: the caller's contract.
        let now = unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.bytes.len()) };
        now == self.bytes.as_slice()
    }
}

impl WriteWatch {
    /// Starts watching `[addr, addr + len)`, or None when that memory cannot be watched: it is
    /// not all present private anonymous memory (a file or shared mapping could change through
    /// another process), or the kernel lacks the interfaces. The watch is armed before this
    /// returns, so a write that races with a copy made after it is seen.
    ///
    /// # Safety
    /// `[addr, addr + len)` must be readable now.
    pub unsafe fn new(addr: usize, len: usize) -> Option<WriteWatch> {
        if len == 0 {
            return None;
        }
        let end = addr + len;
        let lo = addr.next_multiple_of(PAGE).min(end);
        let hi = (end & !(PAGE - 1)).max(lo);
        let mut watch = WriteWatch {
            lo,
            hi,
            head: Edge::new(addr, lo - addr),
            tail: Edge::new(hi, end - hi),
        };
        with_kernel(|k| {
            let (uffd, pagemap) = (k.uffd.as_ref()?, k.pagemap.as_ref()?);
            // Anything not present, or a file (shmem included) page: not ours alone.
            let mut vec = [PageRegion::default(); 1];
            let (found, _) = scan(
                pagemap,
                page_span(addr, len),
                Query {
                    inverted: PAGE_IS_PRESENT,
                    anyof: PAGE_IS_PRESENT | PAGE_IS_FILE,
                    ret: ALL_CATEGORIES,
                    ..Query::default()
                },
                &mut vec,
            )
            .ok()?;
            // SAFETY: the caller's contract.
            (found == 0 && unsafe { watch.arm(uffd) }).then_some(())
        })?;
        Some(watch)
    }

    fn range(&self) -> UffdioRange {
        UffdioRange {
            start: self.lo as u64,
            len: (self.hi - self.lo) as u64,
        }
    }

    /// Registers the whole pages (again: an unregistered neighbour may have taken a page with
    /// it) and write-protects them, then snapshots the edges.
    ///
    /// # Safety
    /// The watched range must be readable.
    unsafe fn arm(&mut self, uffd: &OwnedFd) -> bool {
        if self.hi > self.lo {
            let mut reg = UffdioRegister {
                range: self.range(),
                mode: UFFDIO_REGISTER_MODE_WP,
                ioctls: 0,
            };
            // SAFETY: UFFDIO_REGISTER with its own struct, on our own address range.
            if unsafe { libc::ioctl(uffd.as_raw_fd(), UFFDIO_REGISTER, &mut reg) } != 0 {
                return false;
            }
            let mut wp = UffdioWriteprotect {
                range: self.range(),
                mode: UFFDIO_WRITEPROTECT_MODE_WP,
            };
            // SAFETY: UFFDIO_WRITEPROTECT with its own struct, on the range just registered.
            if unsafe { libc::ioctl(uffd.as_raw_fd(), UFFDIO_WRITEPROTECT, &mut wp) } != 0 {
                return false;
            }
        }
        // SAFETY: the caller's contract.
        unsafe {
            self.head.snapshot();
            self.tail.snapshot();
        }
        true
    }

    /// True when no byte of the range was written (and no page of it dropped or swapped)
    /// since the watch was armed; false re-arms it, before the caller's new copy, so a write
    /// during that copy is seen next time.
    ///
    /// # Safety
    /// The watched range must be readable (the caller holds what it belongs to).
    pub unsafe fn unchanged(&mut self) -> bool {
        with_kernel(|k| {
            let (Some(uffd), Some(pagemap)) = (k.uffd.as_ref(), k.pagemap.as_ref()) else {
                return false;
            };
            // SAFETY: the caller's contract.
            let mut clean = unsafe { self.head.same() && self.tail.same() };
            if clean && self.hi > self.lo {
                let mut vec = [PageRegion::default(); 1];
                let range = (self.lo, self.hi);
                let found = if k.fast_written {
                    // Written, or dropped: anything whose entry is not write-protected
                    // (see `written_scan_is_exact`); a range no longer protected at all
                    // fails the scan (CHECK_WPASYNC).
                    scan(pagemap, range, WRITTEN_ONLY, &mut vec)
                } else {
                    // Written, or not present (zapped by MADV_DONTNEED, swapped: its bytes
                    // may differ when it returns), or no longer protected at all
                    // (CHECK_WPASYNC fails the scan).
                    scan(pagemap, range, WRITTEN_OR_GONE, &mut vec)
                };
                clean = found.is_ok_and(|(found, _)| found == 0);
            }
            if !clean {
                // SAFETY: the caller's contract.
                unsafe { self.arm(uffd) };
            }
            clean
        })
    }
}

impl Drop for WriteWatch {
    fn drop(&mut self) {
        if self.hi == self.lo {
            return;
        }
        with_kernel(|k| {
            if let Some(uffd) = &k.uffd {
                let mut range = self.range();
                // SAFETY: UFFDIO_UNREGISTER of our own range; it also clears the protection.
                // The memory may be gone already (freed), which the kernel reports and we
                // ignore.
                unsafe { libc::ioctl(uffd.as_raw_fd(), UFFDIO_UNREGISTER, &mut range) };
            }
        })
    }
}

/// Write-protects a private mapping of a shared file, `[addr, addr + len)` (whole pages), in
/// the kernel's async mode: every entry, present or empty (a marker, `WP_UNPOPULATED`), so a
/// page later read in through it is protected too. A write through the mapping (copy-on-write)
/// then clears its page's protection, and [`private_pages`] finds our own copies with the
/// written-only scan (15 µs for 64 MiB here) instead of walking every page's categories
/// (0.5 ms; ADR 0039). Call it again on pages dropped since (`MADV_DONTNEED` empties a written
/// page's entry, and an empty entry reads as written). False when this kernel cannot, or its
/// written-only scan is not exact (before 6.10): `private_pages` then walks, as before.
///
/// # Safety
/// `[addr, addr + len)` must be a private mapping of a shared file that the caller owns
/// (registering splits its area of the address space at the range's ends).
pub unsafe fn watch_private(addr: usize, len: usize) -> bool {
    if len == 0 || addr % PAGE != 0 {
        return false;
    }
    let range = UffdioRange {
        start: addr as u64,
        len: len.next_multiple_of(PAGE) as u64,
    };
    with_kernel(|k| {
        let Some(uffd) = k.uffd.as_ref().filter(|_| k.fast_written) else {
            return false;
        };
        let mut reg = UffdioRegister {
            range,
            mode: UFFDIO_REGISTER_MODE_WP,
            ioctls: 0,
        };
        let mut wp = UffdioWriteprotect {
            range,
            mode: UFFDIO_WRITEPROTECT_MODE_WP,
        };
        // SAFETY: UFFDIO_REGISTER, then UFFDIO_WRITEPROTECT of the range just registered, each
        // with its own struct, on a mapping the caller owns.
        unsafe {
            libc::ioctl(uffd.as_raw_fd(), UFFDIO_REGISTER, &mut reg) == 0
                && libc::ioctl(uffd.as_raw_fd(), UFFDIO_WRITEPROTECT, &mut wp) == 0
        }
    })
}

/// The page ranges of `[addr, addr + len)` that are our own private copies, in a private
/// mapping of a shared file: pages this process wrote through the mapping (copy-on-write),
/// present or swapped out. None when the kernel cannot say (the caller must assume every page).
///
/// A range [`watch_private`] armed is asked for its written pages alone; anything else (a
/// range not armed, or armed only in part, fails that scan) is walked page by page.
pub fn private_pages(addr: usize, len: usize) -> Option<Vec<(usize, usize)>> {
    if len == 0 {
        return Some(Vec::new());
    }
    let span = page_span(addr, len);
    with_kernel(|k| {
        let pagemap = k.pagemap.as_ref()?;
        if k.fast_written
            && let Some(out) = written_pages(pagemap, span)
        {
            return Some(out);
        }
        copied_pages(pagemap, span)
    })
}

/// Whether all of `[addr, addr + len)` is armed by [`watch_private`], so that
/// [`private_pages`] answers it with the written-only scan.
pub fn private_watched(addr: usize, len: usize) -> bool {
    len > 0
        && with_kernel(|k| {
            k.fast_written
                && k.pagemap
                    .as_ref()
                    .is_some_and(|p| written_pages(p, page_span(addr, len)).is_some())
        })
}

/// The pages of a range [`watch_private`] armed whose protection is gone: written through the
/// mapping, or dropped and not armed again. None when any part of it is not armed.
fn written_pages(pagemap: &File, (mut lo, hi): (usize, usize)) -> Option<Vec<(usize, usize)>> {
    let mut out = Vec::new();
    let mut vec = [PageRegion::default(); 64];
    while lo < hi {
        let (n, walk_end) = scan(pagemap, (lo, hi), WRITTEN_ONLY, &mut vec).ok()?;
        out.extend(vec[..n].iter().map(|r| (r.start as usize, r.end as usize)));
        if walk_end as usize <= lo {
            return None;
        }
        lo = walk_end as usize;
    }
    Some(out)
}

/// Every page's categories, walked: the anonymous pages (our copies), present or swapped.
fn copied_pages(pagemap: &File, (mut lo, hi): (usize, usize)) -> Option<Vec<(usize, usize)>> {
    let mut out = Vec::new();
    let mut vec = [PageRegion::default(); 64];
    while lo < hi {
        // Not file pages: anonymous copies, and holes (never faulted), told apart below.
        let (n, walk_end) = scan(
            pagemap,
            (lo, hi),
            Query {
                inverted: PAGE_IS_FILE,
                anyof: PAGE_IS_FILE,
                ret: ALL_CATEGORIES,
                ..Query::default()
            },
            &mut vec,
        )
        .ok()?;
        for r in &vec[..n] {
            let c = r.categories;
            if c & PAGE_IS_SWAPPED != 0 || c & (PAGE_IS_PRESENT | PAGE_IS_FILE) == PAGE_IS_PRESENT {
                out.push((r.start as usize, r.end as usize));
            }
        }
        if walk_end as usize <= lo {
            return None;
        }
        lo = walk_end as usize;
    }
    Some(out)
}

/// Whether this kernel (and sandbox) lets us watch writes at all.
pub fn write_watch_supported() -> bool {
    with_kernel(|k| k.uffd.is_some() && k.pagemap.is_some())
}

#[cfg(test)]
#[path = "pages_tests.rs"]
mod tests;

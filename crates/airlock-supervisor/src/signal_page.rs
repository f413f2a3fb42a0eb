//! One page of memory shared by the host and one worker, through which the host interrupts
//! the call that is running.
//!
//! An interrupt cannot travel on the call lane: the worker's only reader of that lane is the
//! thread that is busy running the node. Nor should it need the worker's control thread to take
//! the GIL. So the host writes the id of the call to stop into this page, and the worker's own
//! `comfy.model_management` reads it each time a node asks whether processing was interrupted
//! (`throw_exception_if_processing_interrupted`, `processing_interrupted`): a load of one
//! atomic, no syscall, no lock. Tying the flag to a call id means an interrupt that arrives as
//! a call finishes can never stop the next one.
//!
//! The page also holds when each side last received and last sent on the call lane
//! ([`LaneStamps`]): a reader that slept learns from it how long its peer took to answer,
//! without anybody's wake-up (ADR 0046). A worker that writes nonsense there changes only whether the host's reads spin, for at most
//! the spin budget per read.
//!
//! After that page come the call lane's two mailboxes, one for each direction (ADR 0061,
//! [`crate::mailbox`]).
//!
//! The page is a sealed memfd, inherited by the worker on a fixed descriptor
//! ([`SIGNAL_FD`]), never a name in `/dev/shm`.

use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use airlock_wire::Side;
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};

use crate::spin::LaneStamps;

/// The descriptor on which a worker finds its signal page.
pub const SIGNAL_FD: i32 = 4;
/// The variable by which the host tells a worker that descriptor ([`SIGNAL_FD`]); written by
/// the spawn (`spawn.rs`), read by [`SignalPage::from_env`].
pub const SIGNAL_FD_ENV: &str = "AIRLOCK_SIGNAL_FD";

const PAGE: usize = 4096;
/// The whole mapping: the page of atomics, then a mailbox for each direction of the call lane
/// (the worker's reads first, then the host's; ADR 0061).
const SIZE: usize = PAGE + 2 * crate::mailbox::BOX_BYTES;
/// The page's atomics, by index: the interrupt, then each side's last receipt and last send.
const INTERRUPT: usize = 0;
const HOST_GOT: usize = 1;
const HOST_SENT: usize = 2;
const WORKER_GOT: usize = 3;
const WORKER_SENT: usize = 4;

/// The host's or the worker's mapping of the shared page.
pub struct SignalPage {
    ptr: NonNull<AtomicU64>,
    /// Kept by the host, which hands it to each worker it spawns; the worker closes its copy.
    fd: Option<OwnedFd>,
}

// SAFETY: the page holds only atomics.
unsafe impl Send for SignalPage {}
unsafe impl Sync for SignalPage {}

impl SignalPage {
    /// A fresh page for one worker process (host side).
    pub fn create() -> std::io::Result<SignalPage> {
        let fd = rustix::fs::memfd_create(
            "airlock-signal",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )?;
        rustix::fs::ftruncate(&fd, SIZE as u64)?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
        let mut page = Self::map(fd.as_fd())?;
        page.fd = Some(fd);
        Ok(page)
    }

    /// Maps the page the host handed over (worker side); the descriptor is closed, so nothing
    /// the worker starts inherits it.
    pub fn adopt(fd: OwnedFd) -> std::io::Result<SignalPage> {
        let size = rustix::fs::fstat(&fd)?.st_size;
        if size < SIZE as i64 {
            return Err(std::io::Error::other(format!(
                "signal page is {size} bytes, expected {SIZE}"
            )));
        }
        Self::map(fd.as_fd())
    }

    /// Takes over the page the host handed this worker on the descriptor named by
    /// [`SIGNAL_FD_ENV`] (worker side, at start-up); `None` when it is unset (a worker not
    /// started by our spawn).
    pub fn from_env() -> std::io::Result<Option<SignalPage>> {
        let Ok(fd) = std::env::var(SIGNAL_FD_ENV) else {
            return Ok(None);
        };
        let bad = |why: String| std::io::Error::other(format!("interrupt page (fd {fd}): {why}"));
        let raw: i32 = fd.parse().map_err(|_| bad("not a descriptor".into()))?;
        Self::adopt_inherited(raw)
            .map(Some)
            .map_err(|e| bad(e.to_string()))
    }

    /// Takes over the page the host left on descriptor `fd` (worker side, at start-up).
    pub fn adopt_inherited(fd: i32) -> std::io::Result<SignalPage> {
        // SAFETY: F_GETFD only asks whether `fd` is open.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is open, and by the spawn contract it belongs to this page alone.
        let owned = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        Self::adopt(owned)
    }

    fn map(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<SignalPage> {
        // SAFETY: a fresh shared mapping of a whole, sealed page; unmapped in Drop.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                SIZE,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )?
        };
        let ptr =
            NonNull::new(ptr.cast::<AtomicU64>()).ok_or_else(std::io::Error::last_os_error)?;
        Ok(SignalPage { ptr, fd: None })
    }

    /// The descriptor to hand to a worker (host side only).
    pub fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }

    fn slot(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i <= WORKER_SENT);
        // SAFETY: the mapping is page-aligned, a page long (`i` stays in its first bytes) and
        // lives as long as self.
        unsafe { self.ptr.add(i).as_ref() }
    }

    fn interrupt(&self) -> &AtomicU64 {
        self.slot(INTERRUPT)
    }

    /// Asks the worker to stop call `id` at its next interruption check (host side).
    pub fn raise(&self, id: u64) {
        self.interrupt().store(id, Ordering::Release);
    }

    /// Withdraws an interrupt that was not consumed (host side, once the call has ended).
    pub fn clear(&self, id: u64) {
        let _ = self
            .interrupt()
            .compare_exchange(id, 0, Ordering::AcqRel, Ordering::Acquire);
    }

    /// True once if call `id` has been interrupted; the flag is consumed (worker side).
    pub fn take(&self, id: u64) -> bool {
        id != 0
            && self
                .interrupt()
                .compare_exchange(id, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// The call id whose interrupt is pending, 0 if none.
    pub fn pending(&self) -> u64 {
        self.interrupt().load(Ordering::Acquire)
    }
}

impl SignalPage {
    /// The call lane's mailbox that `reader` reads (ADR 0061). It lives as long as the page:
    /// the caller keeps the page with it.
    pub(crate) fn mailbox(&self, reader: Side) -> crate::mailbox::Mailbox {
        let index = match reader {
            Side::Worker => 0,
            Side::Host => 1,
        };
        // SAFETY: the mapping is SIZE bytes, page-aligned; each mailbox is BOX_BYTES of it
        // past the first page, and the caller keeps the page mapped while it uses it.
        unsafe {
            crate::mailbox::Mailbox::at(
                self.ptr
                    .as_ptr()
                    .cast::<u8>()
                    .add(PAGE + index * crate::mailbox::BOX_BYTES),
            )
        }
    }
}

impl LaneStamps for SignalPage {
    fn got(&self, side: Side, now_ns: u64) {
        self.slot(slots(side).0).store(now_ns, Ordering::Release);
    }

    fn sent(&self, side: Side, now_ns: u64) {
        self.slot(slots(side).1).store(now_ns, Ordering::Release);
    }

    fn last(&self, side: Side) -> (u64, u64) {
        let (got, sent) = slots(side);
        // The send first: a receipt noted between the two loads then reads as an answer not
        // yet given (no think time), never as a longer one.
        let sent = self.slot(sent).load(Ordering::Acquire);
        (self.slot(got).load(Ordering::Acquire), sent)
    }
}

/// A side's receipt and send slots.
fn slots(side: Side) -> (usize, usize) {
    match side {
        Side::Host => (HOST_GOT, HOST_SENT),
        Side::Worker => (WORKER_GOT, WORKER_SENT),
    }
}

impl Drop for SignalPage {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `map` mapped.
        unsafe {
            let _ = rustix::mm::munmap(self.ptr.as_ptr().cast(), SIZE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupt_reaches_the_other_mapping_once_and_only_for_its_call() {
        let host = SignalPage::create().unwrap();
        let dup = host.fd().unwrap().try_clone_to_owned().unwrap();
        let worker = SignalPage::adopt(dup).unwrap();
        assert!(!worker.take(7));
        host.raise(7);
        assert!(
            !worker.take(8),
            "an interrupt for call 7 must not stop call 8"
        );
        assert_eq!(worker.pending(), 7);
        assert!(worker.take(7));
        assert!(!worker.take(7), "consumed");
        host.raise(9);
        host.clear(9);
        assert!(!worker.take(9));
    }

    #[test]
    fn each_side_reads_when_the_other_last_received_and_sent() {
        let host = SignalPage::create().unwrap();
        let dup = host.fd().unwrap().try_clone_to_owned().unwrap();
        let worker = SignalPage::adopt(dup).unwrap();
        assert_eq!(host.last(Side::Worker), (0, 0), "never");
        worker.got(Side::Worker, 40);
        worker.sent(Side::Worker, 42);
        host.got(Side::Host, 5);
        host.sent(Side::Host, 7);
        assert_eq!(host.last(Side::Worker), (40, 42));
        assert_eq!(worker.last(Side::Host), (5, 7));
        host.raise(9);
        assert_eq!(
            worker.last(Side::Host),
            (5, 7),
            "the interrupt has its own slot"
        );
        assert_eq!(worker.pending(), 9);
    }

    #[test]
    fn the_page_cannot_be_shrunk_under_a_mapping() {
        let host = SignalPage::create().unwrap();
        let dup = host.fd().unwrap().try_clone_to_owned().unwrap();
        assert!(rustix::fs::ftruncate(&dup, 0).is_err());
    }
}
